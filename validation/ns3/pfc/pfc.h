// aifabric PFC module on ns-3 (3.37): IEEE 802.1Qbb priority flow control at frame level.
//
// ns-3 3.37 has no PFC. This module models, on ns-3's event scheduler (ns3::Simulator, ns3::Time
// at picosecond resolution), what the headroom formula of controller/qos/formulas.py reasons
// about:
//
//  * Port: one direction of a full-duplex link: eight priority queues plus a control queue
//    (PFC frames go first but wait for the frame on the wire), serialization at the link rate,
//    propagation over the cable (cable_m x ns_per_m). A received PFC frame pauses a priority
//    for quanta x 512 bit times; the pause takes effect after the peer's response time (frames
//    started before it finish, so the last frame may end later still), an XON (quanta 0) ends
//    it.
//  * Switch: per (ingress port, priority) accounting of lossless bytes, byte by byte as they
//    arrive (the XOFF decision is taken at the instant the occupancy crosses the XOFF
//    threshold, as an ASIC counting cells does), a PFC XOFF frame at that instant, refreshed
//    before it expires, an XON once the occupancy falls XON-offset bytes below the threshold;
//    a lossless frame that would take the PG beyond threshold + headroom is dropped and counted.
//    Lossy queues have a byte limit (drop tail) and ECN marking at a step threshold K.
//  * Host: sources of frames (lossless: line rate when not paused; lossy: a DCTCP-style
//    rate controller fed by the ECN marks it receives) and a sink.
//
// The in-flight frame on the reverse link (the first term of the headroom formula) is produced
// on demand by a "filler": a port with fillerBytes > 0 sends lossy frames whenever it has
// nothing else to send, of fillerBytes or (fillerMinBytes > 0) of sizes uniform in
// [fillerMinBytes, fillerBytes] so that XOFF instants do not phase-lock to frame boundaries
// (no frame exceeds the MTU the formula assumes).
#pragma once

#include <ns3/core-module.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aifabric
{

constexpr int kPriorities = 8;
constexpr uint32_t kPfcFrameBytes = 84;  // 64-byte MAC control frame + preamble/SFD + IFG
constexpr uint16_t kMaxQuanta = 0xffff;

struct Frame
{
    uint32_t bytes = 0;   // wire bytes
    uint8_t prio = 0;
    bool lossless = false;
    int flow = -1;        // -1: filler (discarded at the receiving host)
    int dst = -1;         // destination host id
    bool pfc = false;     // a PFC frame (control)
    uint8_t pfcPrio = 0;
    uint16_t quanta = 0;  // 0: XON
    bool ce = false;      // ECN congestion experienced
    int ingress = -1;     // at a switch: the interface it arrived on (for accounting)
};

class Node;

// One direction of a link: the egress of `owner` towards `peer`.
class Port
{
  public:
    Port(Node* owner, int ifIndex, double rateBps, ns3::Time prop, ns3::Time response);
    void Connect(Node* peer, int peerIf) { m_peer = peer; m_peerIf = peerIf; }
    void Enqueue(const Frame& f);
    void SendControl(const Frame& f);
    // A PFC frame for `prio` was fully received at Now(): pause (quanta > 0) or resume.
    void OnPfc(uint8_t prio, uint16_t quanta);
    bool Paused(uint8_t prio, ns3::Time at) const;
    ns3::Time SerializationTime(uint32_t bytes) const;
    void Kick();  // start a transmission if idle

    double rateBps;
    uint32_t fillerBytes = 0;      // largest filler frame; 0: no filler
    uint32_t fillerMinBytes = 0;   // filler sizes are uniform in [min, max] (min 0: all max)
    uint32_t fillerSeed = 1;
    std::array<uint64_t, kPriorities> queuedBytes{};
    uint64_t sentBytes = 0;
    uint64_t pausesReceived = 0;
    uint32_t lossyLimitBytes = 0;     // 0: unlimited
    uint32_t ecnThresholdBytes = 0;   // 0: no marking
    uint64_t lossyDrops = 0;
    uint64_t marks = 0;
    ns3::Time prop;
    ns3::Time response;

  private:
    void Transmit(const Frame& f);
    void Done(Frame f);
    Node* m_owner;
    int m_if;
    Node* m_peer = nullptr;
    int m_peerIf = -1;
    bool m_busy = false;
    std::deque<Frame> m_control;
    std::array<std::deque<Frame>, kPriorities> m_q;
    std::array<ns3::Time, kPriorities> m_pausedFrom{};
    std::array<ns3::Time, kPriorities> m_pausedUntil{};
    int m_rr = 0;
    ns3::EventId m_wake;
    uint64_t m_fillerState = 0;
};

class Node
{
  public:
    virtual ~Node() = default;
    // The first bit of `f` reaches interface `ifIndex` at `first`; this runs at Now() == first.
    virtual void FirstBit(int /*ifIndex*/, const Frame& /*f*/) {}
    // The last bit arrived (Now()).
    virtual void Receive(int ifIndex, const Frame& f) = 0;
    // Port `ifIndex` finished sending `f` (Now()).
    virtual void Sent(int /*ifIndex*/, const Frame& /*f*/) {}
    // Port `ifIndex` is idle with empty queues: a host may refill it.
    virtual void Idle(int /*ifIndex*/) {}
    Port& AddPort(double rateBps, ns3::Time prop, ns3::Time response);
    Port& port(int i) { return *m_ports.at(i); }
    int PortCount() const { return static_cast<int>(m_ports.size()); }

  private:
    std::vector<std::unique_ptr<Port>> m_ports;
};

// Join a's new port and b's new port with a full-duplex link.
std::pair<int, int> Link(Node& a, Node& b, double rateBps, double cableM, double nsPerM,
                         ns3::Time responseA, ns3::Time responseB);

struct PgConfig
{
    uint64_t xoffThresholdBytes = 0;  // the PG pauses when its occupancy crosses this
    uint64_t headroomBytes = 0;       // room above the threshold before lossless drops
    uint64_t xonOffsetBytes = 0;      // resume once the occupancy <= threshold - offset
    uint32_t cellBytes = 1;           // accounting unit: a frame takes whole cells
};

class Switch : public Node
{
  public:
    explicit Switch(std::vector<uint8_t> losslessPrios, PgConfig pg);
    void Route(int dstHost, int ifIndex) { m_routes[dstHost] = ifIndex; }
    void FirstBit(int ifIndex, const Frame& f) override;
    void Receive(int ifIndex, const Frame& f) override;
    void Sent(int ifIndex, const Frame& f) override;

    uint64_t losslessDrops = 0;
    uint64_t xoffSent = 0;
    uint64_t xonSent = 0;
    uint64_t maxHeadroomUsedBytes = 0;  // the most any PG held above its threshold
    uint64_t Occupancy(int ifIndex, uint8_t prio) const;

  private:
    uint64_t Accounted(uint32_t bytes) const;
    void SendPfc(int ifIndex, uint8_t prio, uint16_t quanta);
    void Refresh(int ifIndex, uint8_t prio);
    bool IsLossless(uint8_t prio) const;
    std::vector<uint8_t> m_lossless;
    PgConfig m_pg;
    std::map<int, int> m_routes;
    std::map<std::pair<int, uint8_t>, uint64_t> m_occ;
    std::map<std::pair<int, uint8_t>, bool> m_xoff;
    std::map<std::pair<int, uint8_t>, ns3::EventId> m_refresh;
};

struct Flow
{
    int id = 0;
    int dst = 0;
    uint8_t prio = 0;
    bool lossless = false;
    uint32_t frameBytes = 0;
    uint64_t remainingBytes = UINT64_MAX;  // UINT64_MAX: long-lived
    uint64_t totalBytes = UINT64_MAX;      // the flow's size (done when all are delivered)
    // lossy flows: DCTCP-style rate control (Alizadeh et al. 2010 §3.1 alpha; rate instead of
    // window: cut by alpha/2 once per window with marks, additive increase otherwise)
    double rateBps = 0;          // current sending rate (lossy); line rate when 0
    double alpha = 1.0;
    uint64_t windowAcked = 0, windowMarked = 0;
    ns3::Time nextSend{};
    uint64_t deliveredBytes = 0;
    ns3::Time finished{};
    std::function<void()> onDone;
};

class Host : public Node
{
  public:
    explicit Host(int id) : id(id) {}
    Flow& AddFlow(Flow f);
    void Start();
    void Receive(int ifIndex, const Frame& f) override;
    void Idle(int ifIndex) override;
    void Sent(int ifIndex, const Frame& f) override;
    int id;
    std::map<int, uint64_t> receivedBytes;  // by flow
    uint64_t receivedCe = 0;
    // set by the scenario: where the sender of a flow lives (for ECN feedback) and the delay
    std::function<Host*(int flow)> senderOf;
    ns3::Time feedbackDelay{};
    double lineRateBps = 0;
    double dctcpG = 1.0 / 16;
    ns3::Time dctcpWindow{};

  private:
    void Window();
    void Pump();
    std::vector<Flow> m_flows;
    ns3::EventId m_pump;
    bool m_windowArmed = false;
};

// Sample a quantity over time and report percentiles.
class Sampler
{
  public:
    void Add(double v) { m_v.push_back(v); }
    double Percentile(double p) const;
    double Max() const;
    size_t Count() const { return m_v.size(); }

  private:
    std::vector<double> m_v;
};

std::string JsonNumber(double v);

}  // namespace aifabric
