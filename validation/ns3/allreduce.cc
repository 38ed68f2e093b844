// Scenario d: an all-reduce-shaped pattern over two switches with both classes at once.
//
// Two switches joined by one trunk, four hosts on each; the ring alternates racks (A0 B0 A1 B1
// ...), so every ring step sends 4 chunks A -> B and 4 B -> A over the trunk. Two jobs run the
// same ring at once: a lossless one (priority 3, senders at line rate, PFC with the compiled
// XOFF threshold, headroom and XON; our module pfc/pfc.h) and a lossy one (priority 0, ECN at
// the compiled DCTCP K with DCTCP-style senders, a queue limit). Each job runs --steps steps;
// a step ends when all its eight chunks are delivered. Prints one JSON object.
#include "pfc/pfc.h"

#include <iostream>

using namespace aifabric;
using namespace ns3;

namespace
{
struct Job
{
    std::string name;
    uint8_t prio;
    bool lossless;
    int step = 0;
    int pending = 0;
    Time started{};
    Time finished{};
};
}  // namespace

int
main(int argc, char* argv[])
{
    Time::SetResolution(Time::PS);
    double rateBps = 100e9;
    double cableM = 100;
    double nsPerM = 5.13;
    uint32_t losslessMtu = 4200, lossyMtu = 9216;
    uint64_t headroom = 60000, xoff = 40000, xon = 8400;
    uint64_t k = 20000, lossyLimit = 2000000;
    uint32_t quanta = 394;
    uint64_t chunk = 1000000;
    int steps = 14;
    double rttUs = 10;
    double limitMs = 50;
    CommandLine cmd(__FILE__);
    cmd.AddValue("rate_bps", "rate of every link, bit/s", rateBps);
    cmd.AddValue("cable_m", "cable of every link, m", cableM);
    cmd.AddValue("ns_per_m", "propagation delay, ns per metre", nsPerM);
    cmd.AddValue("lossless_mtu", "lossless frame size, bytes", losslessMtu);
    cmd.AddValue("lossy_mtu", "lossy frame size, bytes", lossyMtu);
    cmd.AddValue("headroom", "PFC headroom per lossless PG, bytes", headroom);
    cmd.AddValue("xoff", "XOFF threshold per PG, bytes", xoff);
    cmd.AddValue("xon", "XON offset, bytes", xon);
    cmd.AddValue("k", "DCTCP marking threshold of the lossy class, bytes", k);
    cmd.AddValue("limit", "lossy queue limit, bytes", lossyLimit);
    cmd.AddValue("quanta", "response time of every MAC, pause quanta", quanta);
    cmd.AddValue("chunk", "bytes each rank sends per step", chunk);
    cmd.AddValue("steps", "ring steps per job", steps);
    cmd.AddValue("rtt_us", "base RTT: ECN feedback delay and DCTCP window, us", rttUs);
    cmd.AddValue("limit_ms", "give up after, ms", limitMs);
    cmd.Parse(argc, argv);

    Time response = PicoSeconds(static_cast<int64_t>(quanta * 512.0e12 / rateBps));
    PgConfig pg{xoff, headroom, xon, 1};
    Switch a({3}, pg), b({3}, pg);
    auto trunk = Link(a, b, rateBps, cableM, nsPerM, response, response);
    std::vector<std::unique_ptr<Host>> hosts;
    const int perRack = 4;
    for (int i = 0; i < 2 * perRack; i++)
    {
        // host id i: rack A for even ring positions; ring order A0 B0 A1 B1 ... = ids 0..7
        hosts.push_back(std::make_unique<Host>(i));
        Switch& sw = (i % 2 == 0) ? a : b;
        Switch& other = (i % 2 == 0) ? b : a;
        auto l = Link(*hosts.back(), sw, rateBps, cableM, nsPerM, response, response);
        sw.Route(i, l.second);
        other.Route(i, (i % 2 == 0) ? trunk.second : trunk.first);
        Port& down = sw.port(l.second);
        down.ecnThresholdBytes = static_cast<uint32_t>(k);
        down.lossyLimitBytes = static_cast<uint32_t>(lossyLimit);
        Host& h = *hosts.back();
        h.lineRateBps = rateBps;
        h.feedbackDelay = MicroSeconds(rttUs / 2);
        h.dctcpWindow = MicroSeconds(rttUs);
    }
    for (Port* p : {&a.port(trunk.first), &b.port(trunk.second)})
    {
        p->ecnThresholdBytes = static_cast<uint32_t>(k);
        p->lossyLimitBytes = static_cast<uint32_t>(lossyLimit);
    }
    const int n = 2 * perRack;
    std::vector<Job> jobs = {{"lossless", 3, true}, {"lossy", 0, false}};
    int flowId = 0;
    std::map<int, Host*> senderOf;
    std::function<void(Job&)> startStep = [&](Job& job) {
        if (job.step == steps)
        {
            job.finished = Simulator::Now();
            return;
        }
        job.pending = n;
        for (int i = 0; i < n; i++)
        {
            Flow f;
            f.id = flowId++;
            f.dst = (i + 1) % n;
            f.prio = job.prio;
            f.lossless = job.lossless;
            f.frameBytes = job.lossless ? losslessMtu : lossyMtu;
            f.remainingBytes = f.totalBytes = chunk;
            f.onDone = [&job, &startStep]() {
                if (--job.pending == 0)
                {
                    job.step++;
                    Simulator::ScheduleNow([&job, &startStep]() { startStep(job); });
                }
            };
            senderOf[f.id] = hosts[i].get();
            hosts[i]->AddFlow(f);
        }
        for (auto& h : hosts)
        {
            h->Start();
        }
    };
    for (auto& h : hosts)
    {
        h->senderOf = [&senderOf](int flow) { return senderOf.at(flow); };
    }
    for (auto& job : jobs)
    {
        startStep(job);
    }
    Simulator::Stop(MilliSeconds(limitMs));
    Simulator::Run();
    double trunkBytes = a.port(trunk.first).sentBytes + b.port(trunk.second).sentBytes;
    Time end = std::max(jobs[0].finished, jobs[1].finished);
    if (end.IsZero())
    {
        end = MilliSeconds(limitMs);
    }
    // ideal: both jobs share each trunk direction, 2 jobs x 4 chunks per step
    double idealS = steps * 2.0 * perRack * chunk * 8 / rateBps;
    uint64_t pauses = a.port(trunk.first).pausesReceived + b.port(trunk.second).pausesReceived;
    uint64_t hostPauses = 0, marks = 0, lossyDrops = 0;
    for (auto& h : hosts)
    {
        hostPauses += h->port(0).pausesReceived;
    }
    for (Switch* s : {&a, &b})
    {
        for (int i = 0; i < s->PortCount(); i++)
        {
            marks += s->port(i).marks;
            lossyDrops += s->port(i).lossyDrops;
        }
    }
    std::cout << "{\"scenario\": \"allreduce\", \"rate_bps\": " << JsonNumber(rateBps)
              << ", \"cable_m\": " << JsonNumber(cableM) << ", \"steps\": " << steps
              << ", \"chunk_bytes\": " << chunk
              << ", \"lossless_done_us\": " << JsonNumber(jobs[0].finished.GetMicroSeconds())
              << ", \"lossy_done_us\": " << JsonNumber(jobs[1].finished.GetMicroSeconds())
              << ", \"lossless_steps\": " << jobs[0].step << ", \"lossy_steps\": " << jobs[1].step
              << ", \"ideal_both_us\": " << JsonNumber(idealS * 1e6)
              << ", \"trunk_utilisation\": "
              << JsonNumber(trunkBytes * 8 / (2 * rateBps * end.GetSeconds()))
              << ", \"lossless_drops\": " << a.losslessDrops + b.losslessDrops
              << ", \"trunk_pauses\": " << pauses << ", \"host_pauses\": " << hostPauses
              << ", \"lossy_drops\": " << lossyDrops << ", \"lossy_marks\": " << marks << "}"
              << std::endl;
    Simulator::Destroy();
    return 0;
}
