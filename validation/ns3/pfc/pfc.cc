// aifabric PFC module on ns-3: see pfc.h for the model and its sources.
#include "pfc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using ns3::MakeEvent;
using ns3::PicoSeconds;
using ns3::Seconds;
using ns3::Simulator;
using ns3::Time;

namespace aifabric
{

// -- Port ----------------------------------------------------------------------------------------
Port::Port(Node* owner, int ifIndex, double rateBps_, Time prop_, Time response_)
    : rateBps(rateBps_),
      prop(prop_),
      response(response_),
      m_owner(owner),
      m_if(ifIndex)
{
}

Time
Port::SerializationTime(uint32_t bytes) const
{
    return PicoSeconds(static_cast<int64_t>(std::llround(bytes * 8.0e12 / rateBps)));
}

bool
Port::Paused(uint8_t prio, Time at) const
{
    return m_pausedFrom[prio] <= at && at < m_pausedUntil[prio];
}

void
Port::OnPfc(uint8_t prio, uint16_t quanta)
{
    Time now = Simulator::Now();
    if (quanta == 0)
    {
        m_pausedUntil[prio] = now;  // XON: resume at once
    }
    else
    {
        // IEEE 802.1Qbb: pause for quanta x 512 bit times; the MAC may take up to its response
        // time to act (IEEE 802.3 Annex 31B.3.7): frames it starts before then still go.
        Time pause = PicoSeconds(static_cast<int64_t>(std::llround(quanta * 512.0e12 / rateBps)));
        pausesReceived++;
        if (Paused(prio, now))
        {
            m_pausedUntil[prio] = std::max(m_pausedUntil[prio], now + response + pause);
        }
        else
        {
            m_pausedFrom[prio] = now + response;
            m_pausedUntil[prio] = m_pausedFrom[prio] + pause;
        }
    }
    Kick();
}

void
Port::Enqueue(const Frame& f)
{
    Frame g = f;
    if (!g.lossless && !g.pfc && g.flow >= 0)
    {
        if (lossyLimitBytes && queuedBytes[g.prio] + g.bytes > lossyLimitBytes)
        {
            lossyDrops++;
            return;
        }
        if (ecnThresholdBytes && queuedBytes[g.prio] >= ecnThresholdBytes)
        {
            g.ce = true;  // DCTCP's step marking at K on the instantaneous queue
            marks++;
        }
    }
    queuedBytes[g.prio] += g.bytes;
    m_q[g.prio].push_back(g);
    Kick();
}

void
Port::SendControl(const Frame& f)
{
    m_control.push_back(f);
    Kick();
}

void
Port::Kick()
{
    if (m_busy)
    {
        return;
    }
    if (!m_control.empty())
    {
        Frame f = m_control.front();
        m_control.pop_front();
        Transmit(f);
        return;
    }
    Time now = Simulator::Now();
    Time wake = Time::Max();
    for (int k = 0; k < kPriorities; k++)
    {
        int p = (m_rr + k) % kPriorities;
        if (m_q[p].empty())
        {
            continue;
        }
        if (Paused(static_cast<uint8_t>(p), now))
        {
            wake = std::min(wake, m_pausedUntil[p]);
            continue;
        }
        Frame f = m_q[p].front();
        m_q[p].pop_front();
        queuedBytes[p] -= f.bytes;
        m_rr = (p + 1) % kPriorities;  // round robin between classes
        Transmit(f);
        return;
    }
    if (fillerBytes)
    {
        Frame f;
        f.bytes = fillerBytes;
        if (fillerMinBytes && fillerMinBytes < fillerBytes)
        {
            // splitmix64: a small deterministic generator per port
            uint64_t z = (m_fillerState += 0x9e3779b97f4a7c15ULL + fillerSeed);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            z ^= z >> 31;
            f.bytes = fillerMinBytes + static_cast<uint32_t>(z % (fillerBytes - fillerMinBytes + 1));
        }
        Transmit(f);
        return;
    }
    if (wake != Time::Max() && !m_wake.IsRunning())
    {
        m_wake = Simulator::Schedule(wake - now, &Port::Kick, this);
    }
}

void
Port::Transmit(const Frame& f)
{
    m_busy = true;
    Time ser = SerializationTime(f.bytes);
    Node* peer = m_peer;
    int peerIf = m_peerIf;
    Simulator::Schedule(prop, [peer, peerIf, f]() { peer->FirstBit(peerIf, f); });
    Simulator::Schedule(ser + prop, [peer, peerIf, f]() { peer->Receive(peerIf, f); });
    Simulator::Schedule(ser, &Port::Done, this, f);
}

void
Port::Done(Frame f)
{
    m_busy = false;
    sentBytes += f.bytes;
    m_owner->Sent(m_if, f);
    Kick();
}

Port&
Node::AddPort(double rateBps, Time prop, Time response)
{
    int i = static_cast<int>(m_ports.size());
    m_ports.push_back(std::make_unique<Port>(this, i, rateBps, prop, response));
    return *m_ports.back();
}

std::pair<int, int>
Link(Node& a, Node& b, double rateBps, double cableM, double nsPerM, Time responseA,
     Time responseB)
{
    Time prop = PicoSeconds(static_cast<int64_t>(std::llround(cableM * nsPerM * 1000.0)));
    int ia = a.PortCount();
    int ib = b.PortCount();
    a.AddPort(rateBps, prop, responseA).Connect(&b, ib);
    b.AddPort(rateBps, prop, responseB).Connect(&a, ia);
    return {ia, ib};
}

// -- Switch --------------------------------------------------------------------------------------
Switch::Switch(std::vector<uint8_t> losslessPrios, PgConfig pg)
    : m_lossless(std::move(losslessPrios)),
      m_pg(pg)
{
}

bool
Switch::IsLossless(uint8_t prio) const
{
    return std::find(m_lossless.begin(), m_lossless.end(), prio) != m_lossless.end();
}

uint64_t
Switch::Accounted(uint32_t bytes) const
{
    uint64_t c = m_pg.cellBytes;
    return (bytes + c - 1) / c * c;
}

uint64_t
Switch::Occupancy(int ifIndex, uint8_t prio) const
{
    auto it = m_occ.find({ifIndex, prio});
    return it == m_occ.end() ? 0 : it->second;
}

void
Switch::FirstBit(int ifIndex, const Frame& f)
{
    if (f.pfc || !f.lossless || !IsLossless(f.prio))
    {
        return;
    }
    auto key = std::make_pair(ifIndex, f.prio);
    uint64_t occ = m_occ[key];
    uint64_t acc = Accounted(f.bytes);
    if (m_xoff[key] || occ + acc <= m_pg.xoffThresholdBytes)
    {
        return;
    }
    // The occupancy crosses the threshold while this frame arrives: XOFF at that instant.
    double frac = m_pg.xoffThresholdBytes > occ
                      ? double(m_pg.xoffThresholdBytes - occ) / double(acc)
                      : 0.0;
    Time at = PicoSeconds(static_cast<int64_t>(
        std::llround(frac * port(ifIndex).SerializationTime(f.bytes).GetPicoSeconds())));
    m_xoff[key] = true;
    Simulator::Schedule(at, &Switch::SendPfc, this, ifIndex, f.prio, kMaxQuanta);
}

void
Switch::Receive(int ifIndex, const Frame& f)
{
    if (f.pfc)
    {
        port(ifIndex).OnPfc(f.pfcPrio, f.quanta);
        return;
    }
    auto route = m_routes.find(f.dst);
    if (route == m_routes.end())
    {
        return;  // fillers and strays
    }
    Frame g = f;
    g.ingress = -1;
    if (f.lossless && IsLossless(f.prio))
    {
        auto key = std::make_pair(ifIndex, f.prio);
        uint64_t acc = Accounted(f.bytes);
        uint64_t& occ = m_occ[key];
        if (occ + acc > m_pg.xoffThresholdBytes + m_pg.headroomBytes)
        {
            losslessDrops++;  // headroom overflow: the frame is lost on a lossless priority
            return;
        }
        occ += acc;
        if (occ > m_pg.xoffThresholdBytes)
        {
            maxHeadroomUsedBytes = std::max(maxHeadroomUsedBytes, occ - m_pg.xoffThresholdBytes);
        }
        g.ingress = ifIndex;
    }
    port(route->second).Enqueue(g);
}

void
Switch::Sent(int /*ifIndex*/, const Frame& f)
{
    if (f.ingress < 0 || f.pfc)
    {
        return;
    }
    auto key = std::make_pair(f.ingress, f.prio);
    uint64_t& occ = m_occ[key];
    occ -= std::min(occ, Accounted(f.bytes));
    if (m_xoff[key] && occ + m_pg.xonOffsetBytes <= m_pg.xoffThresholdBytes)
    {
        m_xoff[key] = false;
        m_refresh[key].Cancel();
        SendPfc(f.ingress, f.prio, 0);
    }
}

void
Switch::SendPfc(int ifIndex, uint8_t prio, uint16_t quanta)
{
    auto key = std::make_pair(ifIndex, prio);
    if (quanta > 0 && !m_xoff[key])
    {
        return;  // resumed before the crossing instant came
    }
    Frame f;
    f.bytes = kPfcFrameBytes;
    f.pfc = true;
    f.pfcPrio = prio;
    f.quanta = quanta;
    port(ifIndex).SendControl(f);
    if (quanta == 0)
    {
        xonSent++;
        return;
    }
    xoffSent++;
    Time pause = PicoSeconds(static_cast<int64_t>(
        std::llround(quanta * 512.0e12 / port(ifIndex).rateBps)));
    m_refresh[key] = Simulator::Schedule(pause / 2, &Switch::Refresh, this, ifIndex, prio);
}

void
Switch::Refresh(int ifIndex, uint8_t prio)
{
    if (m_xoff[{ifIndex, prio}])
    {
        SendPfc(ifIndex, prio, kMaxQuanta);
    }
}

// -- Host ----------------------------------------------------------------------------------------
Flow&
Host::AddFlow(Flow f)
{
    m_flows.push_back(std::move(f));
    return m_flows.back();
}

void
Host::Start()
{
    for (auto& fl : m_flows)
    {
        if (!fl.lossless && fl.rateBps <= 0)
        {
            fl.rateBps = lineRateBps;
        }
        if (fl.nextSend < Simulator::Now())
        {
            fl.nextSend = Simulator::Now();
        }
    }
    if (dctcpWindow.IsStrictlyPositive() && !m_windowArmed)
    {
        m_windowArmed = true;
        Simulator::Schedule(dctcpWindow, &Host::Window, this);
    }
    Pump();
}

void
Host::Window()
{
    // DCTCP (Alizadeh et al., SIGCOMM 2010, §3.1): alpha <- (1 - g) alpha + g F once per
    // window, F the marked fraction; a window with marks cuts by alpha/2. Here the cut and the
    // additive increase (one frame per window) apply to a pacing rate.
    for (auto& fl : m_flows)
    {
        if (fl.lossless)
        {
            continue;
        }
        double frac = fl.windowAcked ? double(fl.windowMarked) / fl.windowAcked : 0.0;
        fl.alpha = (1 - dctcpG) * fl.alpha + dctcpG * frac;
        if (fl.windowMarked)
        {
            fl.rateBps = std::max(fl.rateBps * (1 - fl.alpha / 2), lineRateBps / 1000);
        }
        else
        {
            fl.rateBps = std::min(lineRateBps,
                                  fl.rateBps + fl.frameBytes * 8.0 / dctcpWindow.GetSeconds());
        }
        fl.windowAcked = fl.windowMarked = 0;
    }
    Simulator::Schedule(dctcpWindow, &Host::Window, this);
}

void
Host::Sent(int /*ifIndex*/, const Frame& /*f*/)
{
    Pump();
}

void
Host::Pump()
{
    // Keep at most one frame of each flow in the port's queues; pace lossy flows at their rate.
    Port& p = port(0);
    Time now = Simulator::Now();
    Time next = Time::Max();
    for (auto& fl : m_flows)
    {
        if (fl.remainingBytes == 0 || p.queuedBytes[fl.prio] >= fl.frameBytes)
        {
            continue;
        }
        if (!fl.lossless && fl.nextSend > now)
        {
            next = std::min(next, fl.nextSend);
            continue;
        }
        uint32_t bytes = static_cast<uint32_t>(std::min<uint64_t>(fl.frameBytes, fl.remainingBytes));
        if (fl.remainingBytes != UINT64_MAX)
        {
            fl.remainingBytes -= bytes;
        }
        Frame f;
        f.bytes = bytes;
        f.prio = fl.prio;
        f.lossless = fl.lossless;
        f.flow = fl.id;
        f.dst = fl.dst;
        if (!fl.lossless)
        {
            fl.nextSend = std::max(fl.nextSend, now) + Seconds(bytes * 8.0 / fl.rateBps);
        }
        p.Enqueue(f);
    }
    if (next != Time::Max() && !m_pump.IsRunning())
    {
        m_pump = Simulator::Schedule(next - now, &Host::Pump, this);
    }
}

void
Host::Idle(int /*ifIndex*/)
{
    Pump();
}

void
Host::Receive(int ifIndex, const Frame& f)
{
    if (f.pfc)
    {
        port(ifIndex).OnPfc(f.pfcPrio, f.quanta);
        return;
    }
    if (f.flow < 0)
    {
        return;  // a filler frame
    }
    receivedBytes[f.flow] += f.bytes;
    receivedCe += f.ce ? 1 : 0;
    if (!senderOf)
    {
        return;
    }
    Host* s = senderOf(f.flow);
    int flow = f.flow;
    uint32_t bytes = f.bytes;
    bool ce = f.ce;
    Time at = Simulator::Now();
    Time delay = f.lossless ? Time(0) : feedbackDelay;
    Simulator::Schedule(delay, [s, flow, bytes, ce, at]() {
        for (auto& fl : s->m_flows)
        {
            if (fl.id != flow)
            {
                continue;
            }
            fl.deliveredBytes += bytes;
            fl.windowAcked += bytes;
            fl.windowMarked += ce ? bytes : 0;
            if (fl.deliveredBytes >= fl.totalBytes && fl.onDone && fl.finished.IsZero())
            {
                fl.finished = at;
                fl.onDone();
            }
        }
    });
}

// -- Sampler -------------------------------------------------------------------------------------
double
Sampler::Percentile(double p) const
{
    if (m_v.empty())
    {
        return 0.0;
    }
    std::vector<double> v = m_v;
    std::sort(v.begin(), v.end());
    size_t i = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

double
Sampler::Max() const
{
    return m_v.empty() ? 0.0 : *std::max_element(m_v.begin(), m_v.end());
}

std::string
JsonNumber(double v)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

}  // namespace aifabric
