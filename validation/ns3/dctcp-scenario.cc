// Scenarios a and b: N long TCP flows into one switch port (ns-3's TcpDctcp senders), the
// bottleneck queue a RedQueueDisc with ECN:
//   --mode=dctcp  marking as a step at K (MinTh = K, MaxTh = K + 1 byte, QW = 1: the
//                 instantaneous queue; Alizadeh et al., SIGCOMM 2010, §3.1);
//   --mode=red    DCQCN-style RED: probability 0 at Kmin rising to Pmax at Kmax, 100 % above
//                 (Zhu et al., SIGCOMM 2015, §3), still with DCTCP senders (ns-3 has no DCQCN).
// Senders and the receiver hang off one router by point-to-point links of the same rate; link
// delays are chosen so the unloaded round trip (propagation plus serialization of one data
// frame per hop) is --rtt_us when it can be. Prints one JSON object: queue depth percentiles,
// throughput as a fraction of line rate, marks and drops over the measured window.
#include "pfc/pfc.h"

#include <ns3/applications-module.h>
#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>
#include <ns3/point-to-point-module.h>
#include <ns3/traffic-control-module.h>

#include <iostream>

using namespace ns3;

namespace
{
aifabric::Sampler g_queue;
Ptr<QueueDisc> g_qdisc;
Ptr<PacketSink> g_sink;
uint64_t g_rxAtStart = 0;
uint64_t g_txAtStart = 0;

void
Sample(Time every)
{
    g_queue.Add(g_qdisc->GetNBytes());
    Simulator::Schedule(every, &Sample, every);
}

void
StartMeasuring(Time every)
{
    g_rxAtStart = g_sink->GetTotalRx();
    g_txAtStart = g_qdisc->GetStats().nTotalDequeuedBytes;
    Sample(every);
}
}  // namespace

int
main(int argc, char* argv[])
{
    Time::SetResolution(Time::PS);
    double rateBps = 10e9;
    double rttUs = 10;
    uint32_t flows = 8;
    uint32_t mtu = 9000;
    std::string mode = "dctcp";
    uint64_t k = 0, kmin = 0, kmax = 0;
    double pmaxPercent = 1;
    uint64_t limit = 0;
    double durationMs = 20, warmupMs = 5;
    CommandLine cmd(__FILE__);
    cmd.AddValue("rate_bps", "link rate, bit/s", rateBps);
    cmd.AddValue("rtt_us", "base round-trip time, us", rttUs);
    cmd.AddValue("flows", "long-lived flows into the port", flows);
    cmd.AddValue("mtu", "IP MTU of every link, bytes", mtu);
    cmd.AddValue("mode", "dctcp (step at k) or red (kmin, kmax, pmax)", mode);
    cmd.AddValue("k", "DCTCP marking threshold, bytes", k);
    cmd.AddValue("kmin", "RED Kmin, bytes", kmin);
    cmd.AddValue("kmax", "RED Kmax, bytes", kmax);
    cmd.AddValue("pmax", "RED Pmax, percent", pmaxPercent);
    cmd.AddValue("limit", "queue limit, bytes", limit);
    cmd.AddValue("duration_ms", "simulated time, ms", durationMs);
    cmd.AddValue("warmup_ms", "time before measuring, ms", warmupMs);
    cmd.Parse(argc, argv);
    if (mode == "dctcp")
    {
        kmin = k;
        kmax = k + 1;
        pmaxPercent = 100;
    }
    if (limit == 0)
    {
        limit = std::max<uint64_t>(kmax * 4, 64 * mtu);
    }

    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mtu - 52));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(32 << 20));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(32 << 20));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(1)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
    Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
    Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));
    Config::SetDefault("ns3::RedQueueDisc::Gentle", BooleanValue(false));
    Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
    Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(mtu));
    Config::SetDefault("ns3::RedQueueDisc::MaxSize",
                       QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, limit)));
    Config::SetDefault("ns3::RedQueueDisc::MinTh", DoubleValue(double(kmin)));
    Config::SetDefault("ns3::RedQueueDisc::MaxTh", DoubleValue(double(kmax)));
    Config::SetDefault("ns3::RedQueueDisc::LInterm", DoubleValue(100.0 / pmaxPercent));
    Config::SetDefault("ns3::RedQueueDisc::LinkBandwidth",
                       DataRateValue(DataRate(static_cast<uint64_t>(rateBps))));

    double serUs = mtu * 8.0 / rateBps * 1e6;
    double delayUs = std::max(0.0, (rttUs - 2 * serUs) / 4);
    NodeContainer senders, router, receiver;
    senders.Create(flows);
    router.Create(1);
    receiver.Create(1);
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(rateBps))));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(static_cast<int64_t>(delayUs * 1000))));
    p2p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    std::vector<NetDeviceContainer> access;
    for (uint32_t i = 0; i < flows; i++)
    {
        access.push_back(p2p.Install(senders.Get(i), router.Get(0)));
    }
    NetDeviceContainer bottleneck = p2p.Install(router.Get(0), receiver.Get(0));
    InternetStackHelper stack;
    stack.InstallAll();
    // queue discs before addresses, so no default one is installed
    TrafficControlHelper red;
    red.SetRootQueueDisc("ns3::RedQueueDisc");
    TrafficControlHelper fifo;
    fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue("100000p"));
    for (auto& d : access)
    {
        fifo.Install(d);
    }
    QueueDiscContainer q = red.Install(bottleneck.Get(0));
    fifo.Install(bottleneck.Get(1));
    Ipv4AddressHelper addr;
    for (uint32_t i = 0; i < flows; i++)
    {
        std::string net = "10.1." + std::to_string(i + 1) + ".0";
        addr.SetBase(net.c_str(), "255.255.255.0");
        addr.Assign(access[i]);
    }
    addr.SetBase("10.2.0.0", "255.255.255.0");
    Ipv4InterfaceContainer rif = addr.Assign(bottleneck);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    g_qdisc = q.Get(0);

    uint16_t port = 5000;
    PacketSinkHelper sinkHelper("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
    ApplicationContainer sinkApp = sinkHelper.Install(receiver.Get(0));
    g_sink = DynamicCast<PacketSink>(sinkApp.Get(0));
    sinkApp.Start(Seconds(0));
    for (uint32_t i = 0; i < flows; i++)
    {
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(rif.GetAddress(1), port));
        bulk.SetAttribute("MaxBytes", UintegerValue(0));
        ApplicationContainer a = bulk.Install(senders.Get(i));
        a.Start(MicroSeconds(static_cast<int64_t>(i * 3)));  // staggered starts
    }
    Time every = NanoSeconds(static_cast<int64_t>(std::max(100.0, rttUs * 1000 / 10)));
    Simulator::Schedule(MilliSeconds(warmupMs), &StartMeasuring, every);
    Simulator::Stop(MilliSeconds(durationMs));
    Simulator::Run();
    double window = (durationMs - warmupMs) / 1000;
    double tput = (g_sink->GetTotalRx() - g_rxAtStart) * 8.0 / window;
    QueueDisc::Stats st = g_qdisc->GetStats();
    // the bottleneck's busy share: IP bytes leaving its queue, plus the 2-byte PPP header
    double ipBytes = double(st.nTotalDequeuedBytes - g_txAtStart);
    double wireShare = (ipBytes + 2.0 * ipBytes / mtu) * 8 / window / rateBps;
    uint64_t marks = st.GetNMarkedPackets(RedQueueDisc::UNFORCED_MARK) +
                     st.GetNMarkedPackets(RedQueueDisc::FORCED_MARK);
    std::cout << "{\"scenario\": \"" << mode << "\", \"rate_bps\": " << aifabric::JsonNumber(rateBps)
              << ", \"flows\": " << flows << ", \"k_bytes\": " << k << ", \"kmin_bytes\": " << kmin
              << ", \"kmax_bytes\": " << kmax << ", \"pmax_percent\": " << aifabric::JsonNumber(pmaxPercent)
              << ", \"link_delay_us\": " << aifabric::JsonNumber(delayUs)
              << ", \"queue_p50_bytes\": " << aifabric::JsonNumber(g_queue.Percentile(50))
              << ", \"queue_p99_bytes\": " << aifabric::JsonNumber(g_queue.Percentile(99))
              << ", \"queue_max_bytes\": " << aifabric::JsonNumber(g_queue.Max())
              << ", \"goodput_share\": " << aifabric::JsonNumber(tput / rateBps)
              << ", \"throughput_share\": " << aifabric::JsonNumber(wireShare)
              << ", \"marks\": " << marks << ", \"drops\": " << st.nTotalDroppedPackets
              << ", \"packets\": " << st.nTotalReceivedPackets
              << ", \"measured_ms\": " << aifabric::JsonNumber(durationMs - warmupMs) << "}" << std::endl;
    Simulator::Destroy();
    return 0;
}
