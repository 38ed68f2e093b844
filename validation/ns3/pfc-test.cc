// Unit tests of the PFC module (pfc/pfc.h) with ns-3's test framework (ns3::TestSuite,
// ns3::TestRunner). Run: ./pfc-test (exit status 0 when every case passes).
#include "pfc/pfc.h"

#include <ns3/test.h>

using namespace aifabric;
using namespace ns3;

namespace
{

Time
Bits(double bits, double rateBps)
{
    return PicoSeconds(static_cast<int64_t>(std::llround(bits * 1e12 / rateBps)));
}

// A sender A -> B at 10 Gb/s, 10 m, sending 1000-byte lossless frames back to back.
struct Pair
{
    Host a{1};
    Host b{2};
    double rate = 10e9;
    Time response;
    explicit Pair(uint32_t quanta = 60)
    {
        response = Bits(quanta * 512.0, rate);
        Link(a, b, rate, 10, 5.0, response, response);
        Flow f;
        f.id = 1;
        f.dst = 2;
        f.prio = 3;
        f.lossless = true;
        f.frameBytes = 1000;
        a.AddFlow(f);
    }
};

class PauseQuantaTest : public TestCase
{
  public:
    PauseQuantaTest()
        : TestCase("an XOFF pauses quanta x 512 bit times, after the response time")
    {
    }

    void DoRun() override
    {
        Pair p;
        Port& port = p.a.port(0);
        Simulator::Schedule(MicroSeconds(10), &Port::OnPfc, &port, uint8_t(3), uint16_t(100));
        Time pause = Bits(100 * 512.0, p.rate);  // 5.12 us at 10G
        Time t0 = MicroSeconds(10);
        bool before = true, during = true, after = true, other = true;
        Simulator::Schedule(t0 + p.response - NanoSeconds(1),
                            [&]() { before = port.Paused(3, Simulator::Now()); });
        Simulator::Schedule(t0 + p.response + pause / 2, [&]() {
            during = port.Paused(3, Simulator::Now());
            other = port.Paused(0, Simulator::Now());
        });
        Simulator::Schedule(t0 + p.response + pause,
                            [&]() { after = port.Paused(3, Simulator::Now()); });
        p.a.Start();
        Simulator::Stop(MicroSeconds(30));
        Simulator::Run();
        NS_TEST_EXPECT_MSG_EQ(before, false, "paused before the response time ran out");
        NS_TEST_EXPECT_MSG_EQ(during, true, "not paused during the pause");
        NS_TEST_EXPECT_MSG_EQ(other, false, "another priority was paused");
        NS_TEST_EXPECT_MSG_EQ(after, false, "still paused after quanta x 512 bit times");
        Simulator::Destroy();
    }
};

class ResponseTimeTest : public TestCase
{
  public:
    ResponseTimeTest()
        : TestCase("a paused sender goes on for its response time plus the frame it started")
    {
    }

    void DoRun() override
    {
        Pair p(60);  // 60 quanta = 3840 bytes at 10G
        Port& port = p.a.port(0);
        uint64_t atPfc = 0;
        Simulator::Schedule(MicroSeconds(10), [&]() {
            atPfc = port.sentBytes;
            port.OnPfc(3, kMaxQuanta);
        });
        p.a.Start();
        Simulator::Stop(MicroSeconds(40));
        Simulator::Run();
        uint64_t after = port.sentBytes - atPfc;
        // 3840 bytes of response, rounded to frames: frames started before 10 us + 3.072 us end
        NS_TEST_EXPECT_MSG_GT_OR_EQ(after, 3840 - 1000, "stopped before the response time");
        NS_TEST_EXPECT_MSG_LT_OR_EQ(after, 3840 + 2 * 1000, "sent past response time + frames");
        Simulator::Destroy();
    }
};

class XonTest : public TestCase
{
  public:
    XonTest()
        : TestCase("an XON (quanta 0) resumes at once")
    {
    }

    void DoRun() override
    {
        Pair p;
        Port& port = p.a.port(0);
        Simulator::Schedule(MicroSeconds(5), &Port::OnPfc, &port, uint8_t(3), kMaxQuanta);
        uint64_t atXon = 0;
        Simulator::Schedule(MicroSeconds(20), [&]() {
            port.OnPfc(3, 0);
            atXon = port.sentBytes;
        });
        p.a.Start();
        Simulator::Stop(MicroSeconds(30));
        Simulator::Run();
        // 10 us after the XON at 10G: 12500 bytes, all sent despite the 3.3 ms XOFF
        NS_TEST_EXPECT_MSG_GT_OR_EQ(port.sentBytes - atXon, 11000, "did not resume on XON");
        Simulator::Destroy();
    }
};

// Two senders into one switch port: 2:1, so the ingress PGs fill and pause.
struct Incast
{
    Switch sw;
    Host r{100};
    Host s1{1};
    Host s2{2};
    Incast(uint64_t xoff, uint64_t headroom, uint32_t filler)
        : sw({3}, PgConfig{xoff, headroom, 2000, 1})
    {
        double rate = 10e9;
        Time resp = Bits(60 * 512.0, rate);
        auto rl = Link(sw, r, rate, 100, 5.13, resp, resp);
        sw.Route(100, rl.first);
        int id = 1;
        for (Host* h : {&s1, &s2})
        {
            auto l = Link(*h, sw, rate, 100, 5.13, resp, resp);
            sw.port(l.second).fillerBytes = filler;
            Flow f;
            f.id = id++;
            f.dst = 100;
            f.prio = 3;
            f.lossless = true;
            f.frameBytes = 1000;
            h->AddFlow(f);
            h->Start();
        }
    }
};

class XoffXonTest : public TestCase
{
  public:
    XoffXonTest()
        : TestCase("a PG sends XOFF when it crosses its threshold and XON below the offset")
    {
    }

    void DoRun() override
    {
        Incast in(20000, 100000, 0);
        Simulator::Stop(MicroSeconds(300));
        Simulator::Run();
        NS_TEST_EXPECT_MSG_GT(in.sw.xoffSent, 0, "no XOFF");
        NS_TEST_EXPECT_MSG_GT(in.sw.xonSent, 0, "no XON");
        NS_TEST_EXPECT_MSG_EQ(in.sw.losslessDrops, 0, "dropped with ample headroom");
        NS_TEST_EXPECT_MSG_GT(in.s1.port(0).pausesReceived, 0, "sender never paused");
        NS_TEST_EXPECT_MSG_GT(in.sw.maxHeadroomUsedBytes, 0, "headroom never used");
        Simulator::Destroy();
    }
};

class HeadroomBoundTest : public TestCase
{
  public:
    HeadroomBoundTest()
        : TestCase("headroom use stays within the Cisco and 802.3 bound; less headroom drops")
    {
    }

    void DoRun() override
    {
        // 10G, 100 m at 5.13 ns/m: MTU 1500 (filler) + 84 + 2 x 641.25 + 3840 + 1000
        double bound = 1500 + 84 + 2 * 100 * 5.13 * 10e9 / 8e9 + 3840 + 1000;
        {
            Incast in(20000, 100000, 1500);
            Simulator::Stop(MicroSeconds(2000));
            Simulator::Run();
            NS_TEST_EXPECT_MSG_LT_OR_EQ(double(in.sw.maxHeadroomUsedBytes), bound,
                                        "more arrived after XOFF than the formula allows");
            NS_TEST_EXPECT_MSG_GT(double(in.sw.maxHeadroomUsedBytes), bound - 2500,
                                  "the worst case was never approached");
            Simulator::Destroy();
        }
        {
            Incast in(20000, 1000, 1500);
            Simulator::Stop(MicroSeconds(2000));
            Simulator::Run();
            NS_TEST_EXPECT_MSG_GT(in.sw.losslessDrops, 0, "no drop with 1000 B of headroom");
            Simulator::Destroy();
        }
    }
};

class LossyQueueTest : public TestCase
{
  public:
    LossyQueueTest()
        : TestCase("lossy queues mark CE at K and drop at their limit")
    {
    }

    void DoRun() override
    {
        Host a(1), b(2);
        Link(a, b, 10e9, 1, 5.0, Time(0), Time(0));
        Port& p = a.port(0);
        p.ecnThresholdBytes = 3000;
        p.lossyLimitBytes = 5000;
        for (int i = 0; i < 8; i++)
        {
            Frame f;
            f.bytes = 1000;
            f.flow = 1;
            f.dst = 2;
            p.Enqueue(f);  // the first goes on the wire at once; the rest queue
        }
        // queued before each enqueue: 0 (sent), 0, 1000, 2000, 3000 (marked), 4000 (marked),
        // then 5000 + 1000 > 5000: two drops
        NS_TEST_EXPECT_MSG_EQ(p.marks, 2, "CE marks at K");
        NS_TEST_EXPECT_MSG_EQ(p.lossyDrops, 2, "drops at the limit");
        Simulator::Run();
        NS_TEST_EXPECT_MSG_EQ(b.receivedCe, 2, "marks did not reach the receiver");
        Simulator::Destroy();
    }
};

class PfcTestSuite : public TestSuite
{
  public:
    PfcTestSuite()
        : TestSuite("aifabric-pfc", UNIT)
    {
        AddTestCase(new PauseQuantaTest, TestCase::QUICK);
        AddTestCase(new ResponseTimeTest, TestCase::QUICK);
        AddTestCase(new XonTest, TestCase::QUICK);
        AddTestCase(new XoffXonTest, TestCase::QUICK);
        AddTestCase(new HeadroomBoundTest, TestCase::QUICK);
        AddTestCase(new LossyQueueTest, TestCase::QUICK);
    }
};

PfcTestSuite g_pfcTestSuite;

}  // namespace

int
main(int argc, char* argv[])
{
    Time::SetResolution(Time::PS);  // once, before any Time exists (400G frames last ~0.1 us)
    return TestRunner::Run(argc, argv);
}
