// Scenario c: a 16 -> 1 incast on a lossless priority through one switch with PFC (our module,
// pfc/pfc.h), to check a compiled headroom: 0 drops and pauses > 0 with it, drops with less.
//
// Worst case of the headroom formula (controller/qos/formulas.py pfc_headroom), built in:
// every sender sends lossless frames of lossless_mtu back to back at line rate; the switch's
// egress towards each sender is kept busy with frames of 64..mtu bytes (a "filler"), so an XOFF
// waits for up to one MTU-sized frame; the senders take their full 802.3 response time
// (quanta x 512 bit times) to stop; cable propagation is ns_per_m per metre.
// Prints one JSON object.
#include "pfc/pfc.h"

#include <iostream>

using namespace aifabric;
using ns3::CommandLine;
using ns3::MicroSeconds;
using ns3::PicoSeconds;
using ns3::Simulator;
using ns3::Time;

int
main(int argc, char* argv[])
{
    Time::SetResolution(Time::PS);
    double rateBps = 100e9;
    double cableM = 100;
    double nsPerM = 5.13;
    uint32_t mtu = 9216;
    uint32_t losslessMtu = 4200;
    uint64_t headroom = 0;
    uint64_t xoff = 40000;
    uint64_t xon = 8400;
    uint32_t quanta = 394;
    uint32_t senders = 16;
    uint32_t cell = 1;
    double durationUs = 500;
    uint32_t seedRun = 1;
    CommandLine cmd(__FILE__);
    cmd.AddValue("rate_bps", "link rate, bit/s", rateBps);
    cmd.AddValue("cable_m", "cable length of every link, m", cableM);
    cmd.AddValue("ns_per_m", "propagation delay, ns per metre", nsPerM);
    cmd.AddValue("mtu", "largest frame of any class (the filler), bytes", mtu);
    cmd.AddValue("lossless_mtu", "frame size of the lossless senders, bytes", losslessMtu);
    cmd.AddValue("headroom", "PFC headroom per lossless PG, bytes", headroom);
    cmd.AddValue("xoff", "XOFF threshold per PG, bytes", xoff);
    cmd.AddValue("xon", "XON offset below XOFF, bytes", xon);
    cmd.AddValue("quanta", "sender response time, pause quanta (512 bit times)", quanta);
    cmd.AddValue("senders", "number of senders", senders);
    cmd.AddValue("cell", "buffer cell size, bytes", cell);
    cmd.AddValue("duration_us", "simulated time, us", durationUs);
    cmd.AddValue("run", "run number: sender start stagger (i x run x 7 ns) and filler sizes", seedRun);
    cmd.Parse(argc, argv);

    const uint8_t prio = 3;
    Switch sw({prio}, PgConfig{xoff, headroom, xon, cell});
    Time response = PicoSeconds(static_cast<int64_t>(quanta * 512.0e12 / rateBps));
    std::vector<std::unique_ptr<Host>> hosts;
    const int receiverId = 1000;
    Host receiver(receiverId);
    auto rl = Link(sw, receiver, rateBps, cableM, nsPerM, response, response);
    sw.Route(receiverId, rl.first);
    for (uint32_t i = 0; i < senders; i++)
    {
        hosts.push_back(std::make_unique<Host>(static_cast<int>(i)));
        Host& h = *hosts.back();
        auto l = Link(h, sw, rateBps, cableM, nsPerM, response, response);
        sw.port(l.second).fillerBytes = mtu;
        sw.port(l.second).fillerMinBytes = 64;  // sizes vary: no phase lock with the senders
        sw.port(l.second).fillerSeed = seedRun * 1000 + i;
        Flow f;
        f.id = static_cast<int>(i);
        f.dst = receiverId;
        f.prio = prio;
        f.lossless = true;
        f.frameBytes = losslessMtu;
        h.AddFlow(f);
        Simulator::Schedule(PicoSeconds(7000LL * i * seedRun), &Host::Start, &h);
    }
    Time end = MicroSeconds(durationUs);
    Simulator::Stop(end);
    Simulator::Run();
    uint64_t paused = 0;
    for (auto& h : hosts)
    {
        paused += h->port(0).pausesReceived;
    }
    uint64_t rx = 0;
    for (auto& kv : receiver.receivedBytes)
    {
        rx += kv.second;
    }
    double util = rx * 8.0 / (rateBps * end.GetSeconds());
    std::cout << "{\"scenario\": \"pfc_incast\", \"rate_bps\": " << JsonNumber(rateBps)
              << ", \"cable_m\": " << JsonNumber(cableM) << ", \"headroom_bytes\": " << headroom
              << ", \"senders\": " << senders << ", \"lossless_drops\": " << sw.losslessDrops
              << ", \"xoff_sent\": " << sw.xoffSent << ", \"xon_sent\": " << sw.xonSent
              << ", \"pauses_received\": " << paused
              << ", \"max_headroom_used_bytes\": " << sw.maxHeadroomUsedBytes
              << ", \"egress_utilisation\": " << JsonNumber(util)
              << ", \"simulated_us\": " << JsonNumber(durationUs) << "}" << std::endl;
    Simulator::Destroy();
    return 0;
}
