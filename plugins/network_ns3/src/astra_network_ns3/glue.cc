// C++ glue between astra-sim-py's event loop and ns-3 (compiled after routing.cc, whose EcmpRouting it installs
// on every node: once into a cached shared library, or at run time with cppyy.cppdef; see glue.py).
//
// Everything per packet stays here; Python calls in once per message (Send), once per slice of
// simulated time (RunSlice) and reads the completions a slice produced. Messages between one pair of
// hosts share one TCP connection (CC_MODE 1: one DCQCN rate-paced UDP sender), in order: the receiver
// completes a message when its last byte has been delivered, so messages of a pair complete in the order
// they were sent (FIFO).
//
// A link that goes down mid-run (ScheduleLinkDown, ns-3's LINK_DOWN): at its time both ends' IPv4 interfaces go
// down (Ipv4::SetDown: nothing is sent on them, and what still arrives over the cable is dropped,
// DROP_INTERFACE_DOWN) and every node's routes are computed again over the links left. TCP retransmits what was
// lost; a connection with bytes in flight and no route left stops the run (CutLink), never a hang.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace astra_ns3
{
using namespace ns3;

struct Conn
{
    int src = 0;
    int dst = 0;
    Ptr<Socket> tx;
    uint64_t pending = 0; // bytes queued by messages, not yet handed to the socket
    uint64_t total = 0;   // bytes of every message queued so far
    uint64_t rx = 0;      // bytes delivered in order at the receiver
    uint16_t sport = 0;
    std::deque<std::pair<uint64_t, uint64_t>> ends; // (cumulative end byte, message id)
    // DCQCN (CC_MODE 1): the reaction point's state at the sender, the notification point's at the receiver.
    bool sending = false;
    double lineBps = 0;
    double rate = 0;   // current rate R_C (bit/s)
    double target = 0; // target rate R_T (bit/s)
    double alpha = 1.0;
    uint32_t stage = 0;
    bool cnpSinceAlpha = false;
    Time lastDecrease = Seconds(-1);
    Time lastCnpSent = Seconds(-1);
    Ipv4Address dstAddr;
    EventId sendEvent;
    EventId rateTimer;
    EventId alphaTimer;
};

struct DcqcnParams
{
    double g = 1.0 / 256;
    double rateAiBps = 5e7;
    double rateHaiBps = 1e8;
    double minRateBps = 1e8;
    double rpTimerUs = 900;
    double alphaIntervalUs = 55;
    double decreaseIntervalUs = 4;
    uint32_t fastRecovery = 5;
    bool clamp = false;
    double cnpIntervalUs = 50;
};

struct Port
{
    int node = 0;
    int peer = 0;
    uint64_t rateBps = 0;
    Ptr<QueueDisc> qdisc;
    uint64_t txBytes = 0;
    uint64_t txPackets = 0;
    uint32_t peakQueueBytes = 0;
};

class Net
{
  public:
    // ------------------------------------------------------------ setup (called from Python once)
    void ConfigureDcqcn(double g, double rateAiBps, double rateHaiBps, double minRateBps, double rpTimerUs,
                        double alphaIntervalUs, double decreaseIntervalUs, uint32_t fastRecovery, bool clamp,
                        double cnpIntervalUs)
    {
        m_dcqcnParams.g = g;
        m_dcqcnParams.rateAiBps = rateAiBps;
        m_dcqcnParams.rateHaiBps = rateHaiBps;
        m_dcqcnParams.minRateBps = minRateBps;
        m_dcqcnParams.rpTimerUs = rpTimerUs;
        m_dcqcnParams.alphaIntervalUs = alphaIntervalUs;
        m_dcqcnParams.decreaseIntervalUs = decreaseIntervalUs;
        m_dcqcnParams.fastRecovery = fastRecovery;
        m_dcqcnParams.clamp = clamp;
        m_dcqcnParams.cnpIntervalUs = cnpIntervalUs;
    }

    void Configure(int ccMode, uint32_t segmentBytes, double dctcpG, uint32_t minRtoUs)
    {
        m_dctcp = ccMode == 8;
        m_dcqcn = ccMode == 1;
        m_segment = segmentBytes;
        Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                           TypeIdValue(m_dctcp ? TcpDctcp::GetTypeId() : TcpNewReno::GetTypeId()));
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segmentBytes));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(8u << 20));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(8u << 20));
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MicroSeconds(minRtoUs)));
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
        // Always set: defaults are process-wide and outlive the previous network (0.0625 is ns-3's g).
        Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(dctcpG > 0 ? dctcpG : 0.0625));
        // RED as DCTCP wants it: the instantaneous queue, marks instead of drops, all marked above K_max.
        Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
        Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));
        Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
        Config::SetDefault("ns3::RedQueueDisc::Gentle", BooleanValue(false));
        Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(segmentBytes + 54));
    }

    // A fresh ns-3 world: ns-3's simulator, node list and address allocator are process-wide, and a
    // process may run several simulations one after the other.
    void AddNodes(int count)
    {
        Simulator::Destroy();
        Ipv4AddressGenerator::Reset();
        RngSeedManager::SetSeed(1);
        RngSeedManager::SetRun(1);
        RngSeedManager::ResetNextStreamIndex(); // random streams (RED's marks) as in a fresh process
        m_nodes.Create(count);
        for (int i = 0; i < count; i++)
        {
            m_index[PeekPointer(m_nodes.Get(i))] = i;
        }
        InternetStackHelper stack;
        stack.Install(m_nodes);
        m_isSwitch.assign(count, false);
        m_addr.assign(count, Ipv4Address());
    }

    void MarkSwitch(int node)
    {
        m_isSwitch[node] = true;
    }

    // One point-to-point link; for a switch end, RED with ECN (kmin/kmax in bytes, pmax) and bufferBytes
    // (ecn false: a plain FIFO of bufferBytes); a host end gets a FIFO too deep to drop.
    void AddLink(int a, int b, uint64_t rateBps, uint64_t delayNs, bool ecn, uint64_t kminA, uint64_t kmaxA,
                 double pmaxA, uint64_t bufA, uint64_t kminB, uint64_t kmaxB, double pmaxB, uint64_t bufB)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rateBps)));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs)));
        p2p.SetQueue("ns3::DropTailQueue", "MaxSize", QueueSizeValue(QueueSize("2p")));
        NetDeviceContainer devs = p2p.Install(m_nodes.Get(a), m_nodes.Get(b));
        int ends[2] = {a, b};
        uint64_t kmin[2] = {kminA, kminB};
        uint64_t kmax[2] = {kmaxA, kmaxB};
        double pmax[2] = {pmaxA, pmaxB};
        uint64_t buf[2] = {bufA, bufB};
        for (int i = 0; i < 2; i++)
        {
            int node = ends[i];
            TrafficControlHelper tch;
            std::string size = std::to_string(buf[i]) + "B";
            if (m_isSwitch[node] && ecn)
            {
                tch.SetRootQueueDisc("ns3::RedQueueDisc",
                                     "MaxSize", QueueSizeValue(QueueSize(size)),
                                     "MinTh", DoubleValue(double(kmin[i])),
                                     "MaxTh", DoubleValue(double(kmax[i])),
                                     "LInterm", DoubleValue(pmax[i] > 0 ? 1.0 / pmax[i] : 1e9),
                                     "LinkBandwidth", DataRateValue(DataRate(rateBps)),
                                     "LinkDelay", TimeValue(NanoSeconds(delayNs)));
            }
            else
            {
                tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize(size)));
            }
            QueueDiscContainer q = tch.Install(devs.Get(i));
            Port port;
            port.node = node;
            port.peer = ends[1 - i];
            port.rateBps = rateBps;
            port.qdisc = q.Get(0);
            m_ports.push_back(port);
            size_t index = m_ports.size() - 1;
            devs.Get(i)->TraceConnectWithoutContext("PhyTxEnd", MakeBoundCallback(&Net::OnTx, this, index));
            port.qdisc->TraceConnectWithoutContext("BytesInQueue",
                                                   MakeBoundCallback(&Net::OnQueue, this, index));
            port.qdisc->TraceConnectWithoutContext("Drop", MakeBoundCallback(&Net::OnDrop, this));
            if (m_hostRate.find(node) == m_hostRate.end())
            {
                m_hostRate[node] = double(rateBps);
            }
        }
        Ipv4InterfaceContainer ifs = m_ipv4.Assign(devs);
        m_ipv4.NewNetwork();
        for (int i = 0; i < 2; i++)
        {
            Adjacent adj;
            adj.peer = ends[1 - i];
            adj.iface = ifs.Get(i).second;
            adj.gateway = ifs.GetAddress(1 - i);
            m_adj[ends[i]].push_back(adj);
            m_hostAddrs[ends[i]].push_back(ifs.GetAddress(i));
        }
        for (int i = 0; i < 2; i++)
        {
            m_addrToNode[ifs.GetAddress(i).Get()] = ends[i];
            if (m_addr[ends[i]] == Ipv4Address())
            {
                m_addr[ends[i]] = ifs.GetAddress(i);
            }
        }
    }

    // Routes (shortest paths, per-flow ECMP) and a listening socket on every host.
    void Finish()
    {
        int count = int(m_nodes.GetN());
        m_routing.assign(count, nullptr);
        for (int n = 0; n < count; n++)
        {
            Ptr<Ipv4> ipv4 = m_nodes.Get(n)->GetObject<Ipv4>();
            m_routing[n] = CreateObject<EcmpRouting>();
            m_routing[n]->m_salt = uint32_t(n);
            Ptr<Ipv4ListRouting> list = DynamicCast<Ipv4ListRouting>(ipv4->GetRoutingProtocol());
            list->AddRoutingProtocol(m_routing[n], 100);
            m_nodes.Get(n)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
                "Drop", MakeBoundCallback(&Net::OnIpDrop, this));
        }
        ComputeRoutes();
        Listen();
    }

    // Every node's routes over the links up now (routing.cc's ComputeRoutes).
    void ComputeRoutes()
    {
        astra_ns3::ComputeRoutes(m_routing, m_adj, m_isSwitch, m_hostAddrs, m_down);
    }

    // A listening socket on every host.
    void Listen()
    {
        for (uint32_t n = 0; n < m_nodes.GetN(); n++)
        {
            if (m_isSwitch[n])
            {
                continue;
            }
            if (m_dcqcn)
            {
                Ptr<Socket> data = Socket::CreateSocket(m_nodes.Get(n), UdpSocketFactory::GetTypeId());
                data->SetIpRecvTos(true);
                data->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
                data->SetRecvCallback(MakeCallback(&Net::OnUdpData, this));
                Ptr<Socket> cnp = Socket::CreateSocket(m_nodes.Get(n), UdpSocketFactory::GetTypeId());
                cnp->Bind(InetSocketAddress(Ipv4Address::GetAny(), kCnpPort));
                cnp->SetRecvCallback(MakeCallback(&Net::OnCnp, this));
                m_cnpSocket[n] = cnp;
                continue;
            }
            Ptr<Socket> s = Socket::CreateSocket(m_nodes.Get(n), TcpSocketFactory::GetTypeId());
            EnableEcn(s);
            s->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
            s->Listen();
            s->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                 MakeCallback(&Net::OnAccept, this));
        }
    }

    // ------------------------------------------------------------ per message / per slice
    // Message `id` of `bytes` from host src to host dst, entering ns-3 at absolute time atNs (>= Now).
    void Send(int src, int dst, uint64_t bytes, uint64_t id, int64_t atNs)
    {
        Time delay = NanoSeconds(atNs) - Simulator::Now();
        Simulator::ScheduleWithContext(m_nodes.Get(src)->GetId(), delay, &Net::DoSend, this, src, dst, bytes, id);
    }

    // The link a-b goes down at absolute time atNs (failure number `index`, for the statistics and CutLink).
    void ScheduleLinkDown(int a, int b, int64_t atNs, int index)
    {
        if (int(m_failureDrops.size()) <= index)
        {
            m_failureDrops.resize(index + 1, 0);
        }
        Simulator::Schedule(NanoSeconds(atNs) - Simulator::Now(), &Net::LinkDown, this, a, b, index);
    }

    // The failure that left a connection with bytes in flight and no route (-1: none), and that connection.
    int CutLink() const
    {
        return m_cutLink;
    }

    int CutSrc() const
    {
        return m_cutSrc;
    }

    int CutDst() const
    {
        return m_cutDst;
    }

    // Packets failure `index` lost: those that reached its downed interfaces (on the cable or in its ports'
    // queues), and those that reached a node left with no route on (queued towards the cable before it failed).
    uint64_t FailureDrops(int index) const
    {
        return index < int(m_failureDrops.size()) ? m_failureDrops[index] : 0;
    }

    // Run ns-3 until absolute time targetNs (< 0: no bound), or until the event that completed a message.
    void RunSlice(int64_t targetNs)
    {
        EventId stop;
        if (targetNs >= 0)
        {
            stop = Simulator::Schedule(NanoSeconds(targetNs) - Simulator::Now(), &Net::StopNow);
        }
        Simulator::Run();
        Simulator::Cancel(stop);
    }

    int64_t NowNs() const
    {
        return Simulator::Now().GetNanoSeconds();
    }

    bool HasEvents() const
    {
        return !Simulator::IsFinished();
    }

    // Completions since the last ClearDone: message id, time (ns), source port.
    size_t DoneCount() const
    {
        return m_doneId.size();
    }

    uint64_t DoneId(size_t i) const
    {
        return m_doneId[i];
    }

    int64_t DoneNs(size_t i) const
    {
        return m_doneNs[i];
    }

    uint16_t DoneSport(size_t i) const
    {
        return m_doneSport[i];
    }

    void ClearDone()
    {
        m_doneId.clear();
        m_doneNs.clear();
        m_doneSport.clear();
    }

    // ------------------------------------------------------------ statistics (after the run)
    size_t PortCount() const
    {
        return m_ports.size();
    }

    int PortNode(size_t i) const
    {
        return m_ports[i].node;
    }

    int PortPeer(size_t i) const
    {
        return m_ports[i].peer;
    }

    uint64_t PortRate(size_t i) const
    {
        return m_ports[i].rateBps;
    }

    uint64_t PortTxBytes(size_t i) const
    {
        return m_ports[i].txBytes;
    }

    uint64_t PortTxPackets(size_t i) const
    {
        return m_ports[i].txPackets;
    }

    uint32_t PortPeakQueue(size_t i) const
    {
        return m_ports[i].peakQueueBytes;
    }

    uint64_t PortDrops(size_t i) const
    {
        return m_ports[i].qdisc->GetStats().nTotalDroppedPackets;
    }

    uint64_t PortMarks(size_t i) const
    {
        return m_ports[i].qdisc->GetStats().nTotalMarkedPackets;
    }

    // The host's first address as a 32-bit number (fct.txt writes it in hex).
    uint32_t HostIp(int node) const
    {
        return m_addr[node].Get();
    }

    uint64_t Drops() const
    {
        return m_drops;
    }

    uint64_t Cnps() const
    {
        return m_cnps;
    }

    void Destroy()
    {
        Simulator::Destroy();
    }

  private:
    static constexpr uint16_t kPort = 5000;
    static constexpr uint16_t kCnpPort = 5001;
    static constexpr uint32_t kCnpBytes = 16;
    static constexpr uint32_t kUdpHeaderBytes = 30; // PPP 2 + IPv4 20 + UDP 8

    static void StopNow()
    {
        Simulator::Stop();
    }

    void LinkDown(int a, int b, int index)
    {
        m_down.insert(std::make_pair(std::min(a, b), std::max(a, b)));
        m_lastFailure = index;
        int ends[2] = {a, b};
        for (int i = 0; i < 2; i++)
        {
            for (const Adjacent& adj : m_adj[ends[i]])
            {
                if (adj.peer == ends[1 - i])
                {
                    m_ifaceFailure[std::make_pair(ends[i], adj.iface)] = index;
                    m_nodes.Get(ends[i])->GetObject<Ipv4>()->SetDown(adj.iface);
                }
            }
        }
        ComputeRoutes();
        for (const auto& entry : m_conns)
        {
            const Conn* c = entry.second;
            if (c->rx < c->total && m_routing[c->src]->m_routes.count(m_addr[c->dst].Get()) == 0)
            {
                m_cutLink = index;
                m_cutSrc = c->src;
                m_cutDst = c->dst;
                Simulator::Stop(); // back to Python, which names the link
                return;
            }
        }
    }

    static void OnIpDrop(Net* net, const Ipv4Header&, Ptr<const Packet>, Ipv4L3Protocol::DropReason reason,
                         Ptr<Ipv4> ipv4, uint32_t iface)
    {
        if (reason == Ipv4L3Protocol::DROP_INTERFACE_DOWN)
        {
            int node = net->m_index[PeekPointer(ipv4->GetObject<Node>())];
            auto it = net->m_ifaceFailure.find(std::make_pair(node, iface));
            if (it != net->m_ifaceFailure.end())
            {
                net->m_failureDrops[it->second] += 1;
            }
        }
        else if (reason == Ipv4L3Protocol::DROP_NO_ROUTE && net->m_lastFailure >= 0)
        {
            // queued for the cable before it went down, now at a node with no way on: lost to the last failure
            net->m_failureDrops[net->m_lastFailure] += 1;
        }
    }

    void EnableEcn(Ptr<Socket> s)
    {
        if (m_dctcp)
        {
            DynamicCast<TcpSocketBase>(s)->SetUseEcn(TcpSocketState::On);
        }
    }

    void DoSend(int src, int dst, uint64_t bytes, uint64_t id)
    {
        auto key = std::make_pair(src, dst);
        auto it = m_conns.find(key);
        Conn* c;
        if (m_dcqcn)
        {
            DcqcnSend(src, dst, bytes, id);
            return;
        }
        if (it == m_conns.end())
        {
            c = new Conn();
            c->src = src;
            c->dst = dst;
            c->tx = Socket::CreateSocket(m_nodes.Get(src), TcpSocketFactory::GetTypeId());
            EnableEcn(c->tx);
            c->tx->Bind();
            c->tx->Connect(InetSocketAddress(m_addr[dst], kPort));
            c->tx->SetSendCallback(MakeCallback(&Net::OnSendSpace, this));
            Address local;
            c->tx->GetSockName(local);
            c->sport = InetSocketAddress::ConvertFrom(local).GetPort();
            m_conns[key] = c;
            m_bySocket[PeekPointer(c->tx)] = c;
        }
        else
        {
            c = it->second;
        }
        c->total += bytes;
        c->ends.emplace_back(c->total, id);
        c->pending += bytes;
        Push(c);
    }

    void Push(Conn* c)
    {
        while (c->pending > 0)
        {
            uint32_t room = c->tx->GetTxAvailable();
            if (room == 0)
            {
                return;
            }
            uint64_t n = std::min<uint64_t>(std::min<uint64_t>(c->pending, room), 1u << 20);
            int sent = c->tx->Send(Create<Packet>(uint32_t(n)), 0);
            if (sent <= 0)
            {
                return;
            }
            c->pending -= uint64_t(sent);
        }
    }

    // ------------------------------------------------------------ DCQCN (rate-based, over UDP)
    void DcqcnSend(int src, int dst, uint64_t bytes, uint64_t id)
    {
        auto key = std::make_pair(src, dst);
        auto it = m_conns.find(key);
        Conn* c;
        if (it == m_conns.end())
        {
            c = new Conn();
            c->src = src;
            c->dst = dst;
            c->dstAddr = m_addr[dst];
            c->tx = Socket::CreateSocket(m_nodes.Get(src), UdpSocketFactory::GetTypeId());
            c->tx->SetIpTos(0x02); // ECT(0): switches mark instead of dropping
            c->tx->Bind();
            c->tx->Connect(InetSocketAddress(m_addr[dst], kPort));
            Address local;
            c->tx->GetSockName(local);
            c->sport = InetSocketAddress::ConvertFrom(local).GetPort();
            c->lineBps = m_hostRate[src];
            c->rate = c->lineBps;
            c->target = c->lineBps;
            m_conns[key] = c;
        }
        else
        {
            c = it->second;
        }
        c->total += bytes;
        c->ends.emplace_back(c->total, id);
        c->pending += bytes;
        if (!c->sending)
        {
            c->sending = true;
            c->rateTimer = Simulator::Schedule(MicroSeconds(m_dcqcnParams.rpTimerUs), &Net::RateTimer, this, c);
            c->alphaTimer =
                Simulator::Schedule(MicroSeconds(m_dcqcnParams.alphaIntervalUs), &Net::AlphaTimer, this, c);
            SendNext(c);
        }
    }

    // One packet at the current rate; the next one after its serialisation time at that rate.
    void SendNext(Conn* c)
    {
        if (c->pending == 0)
        {
            c->sending = false; // idle: the timers stop with it (the rate keeps its value)
            Simulator::Cancel(c->rateTimer);
            Simulator::Cancel(c->alphaTimer);
            return;
        }
        uint32_t n = uint32_t(std::min<uint64_t>(c->pending, m_segment));
        c->tx->Send(Create<Packet>(n), 0);
        c->pending -= n;
        double wireBits = double(n + kUdpHeaderBytes) * 8.0;
        c->sendEvent = Simulator::Schedule(Seconds(wireBits / c->rate), &Net::SendNext, this, c);
    }

    void AlphaTimer(Conn* c)
    {
        if (!c->cnpSinceAlpha)
        {
            c->alpha *= 1.0 - m_dcqcnParams.g;
        }
        c->cnpSinceAlpha = false;
        c->alphaTimer = Simulator::Schedule(MicroSeconds(m_dcqcnParams.alphaIntervalUs), &Net::AlphaTimer, this, c);
    }

    // Rate increase at every timer expiry: fast recovery, then additive, then hyper increase.
    void RateTimer(Conn* c)
    {
        const DcqcnParams& p = m_dcqcnParams;
        c->stage += 1;
        if (c->stage > p.fastRecovery)
        {
            c->target += c->stage == p.fastRecovery + 1 ? p.rateAiBps : p.rateHaiBps;
            c->target = std::min(c->target, c->lineBps);
        }
        c->rate = std::min(c->lineBps, (c->rate + c->target) / 2);
        c->rateTimer = Simulator::Schedule(MicroSeconds(p.rpTimerUs), &Net::RateTimer, this, c);
    }

    void OnCnp(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        int me = m_index[PeekPointer(s->GetNode())];
        while ((p = s->RecvFrom(from)))
        {
            int peer = m_addrToNode[InetSocketAddress::ConvertFrom(from).GetIpv4().Get()];
            auto it = m_conns.find(std::make_pair(me, peer));
            if (it == m_conns.end())
            {
                continue;
            }
            Conn* c = it->second;
            const DcqcnParams& prm = m_dcqcnParams;
            c->alpha = (1.0 - prm.g) * c->alpha + prm.g;
            c->cnpSinceAlpha = true;
            Time now = Simulator::Now();
            if (c->lastDecrease >= Seconds(0) && now - c->lastDecrease < MicroSeconds(prm.decreaseIntervalUs))
            {
                continue;
            }
            c->lastDecrease = now;
            if (prm.clamp || c->stage > 0)
            {
                c->target = c->rate;
            }
            c->rate = std::max(prm.minRateBps, c->rate * (1.0 - c->alpha / 2));
            c->stage = 0;
            if (c->sending)
            {
                Simulator::Cancel(c->rateTimer);
                c->rateTimer = Simulator::Schedule(MicroSeconds(prm.rpTimerUs), &Net::RateTimer, this, c);
            }
        }
    }

    void OnUdpData(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        int me = m_index[PeekPointer(s->GetNode())];
        bool done = false;
        while ((p = s->RecvFrom(from)))
        {
            Ipv4Address fromIp = InetSocketAddress::ConvertFrom(from).GetIpv4();
            int src = m_addrToNode[fromIp.Get()];
            auto it = m_conns.find(std::make_pair(src, me));
            if (it == m_conns.end())
            {
                continue;
            }
            Conn* c = it->second;
            c->rx += p->GetSize();
            SocketIpTosTag tos;
            Time now = Simulator::Now();
            if (p->PeekPacketTag(tos) && (tos.GetTos() & 0x3) == 0x3 &&
                (c->lastCnpSent < Seconds(0) || now - c->lastCnpSent >= MicroSeconds(m_dcqcnParams.cnpIntervalUs)))
            {
                c->lastCnpSent = now;
                m_cnps += 1;
                m_cnpSocket[me]->SendTo(Create<Packet>(kCnpBytes), 0, InetSocketAddress(fromIp, kCnpPort));
            }
            while (!c->ends.empty() && c->ends.front().first <= c->rx)
            {
                m_doneId.push_back(c->ends.front().second);
                m_doneNs.push_back(now.GetNanoSeconds());
                m_doneSport.push_back(c->sport);
                c->ends.pop_front();
                done = true;
            }
        }
        if (done)
        {
            Simulator::Stop();
        }
    }

    static void OnDrop(Net* net, Ptr<const QueueDiscItem>)
    {
        net->m_drops += 1;
    }

    void OnSendSpace(Ptr<Socket> s, uint32_t)
    {
        auto it = m_bySocket.find(PeekPointer(s));
        if (it != m_bySocket.end())
        {
            Push(it->second);
        }
    }

    void OnAccept(Ptr<Socket> s, const ns3::Address& from)
    {
        int src = m_addrToNode[InetSocketAddress::ConvertFrom(from).GetIpv4().Get()];
        int dst = m_index[PeekPointer(s->GetNode())];
        m_rxConn[PeekPointer(s)] = std::make_pair(src, dst);
        s->SetRecvCallback(MakeCallback(&Net::OnRecv, this));
    }

    void OnRecv(Ptr<Socket> s)
    {
        auto pair = m_rxConn[PeekPointer(s)];
        Conn* c = m_conns[pair];
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            c->rx += p->GetSize();
        }
        bool done = false;
        while (!c->ends.empty() && c->ends.front().first <= c->rx)
        {
            m_doneId.push_back(c->ends.front().second);
            m_doneNs.push_back(Simulator::Now().GetNanoSeconds());
            m_doneSport.push_back(c->sport);
            c->ends.pop_front();
            done = true;
        }
        if (done)
        {
            Simulator::Stop(); // hand control back to Python at the completion time
        }
    }

    static void OnTx(Net* net, size_t index, Ptr<const Packet> p)
    {
        net->m_ports[index].txBytes += p->GetSize();
        net->m_ports[index].txPackets += 1;
    }

    static void OnQueue(Net* net, size_t index, uint32_t, uint32_t bytes)
    {
        if (bytes > net->m_ports[index].peakQueueBytes)
        {
            net->m_ports[index].peakQueueBytes = bytes;
        }
    }

    bool m_dctcp = false;
    bool m_dcqcn = false;
    uint32_t m_segment = 1000;
    DcqcnParams m_dcqcnParams;
    std::map<int, double> m_hostRate;
    std::map<int, Ptr<Socket>> m_cnpSocket;
    uint64_t m_drops = 0;
    uint64_t m_cnps = 0;
    NodeContainer m_nodes;
    std::vector<bool> m_isSwitch;
    std::vector<Ipv4Address> m_addr;
    std::map<uint32_t, int> m_addrToNode;
    std::map<Node*, int> m_index;
    std::map<int, std::vector<Adjacent>> m_adj;
    std::map<int, std::vector<Ipv4Address>> m_hostAddrs;
    Ipv4AddressHelper m_ipv4{"10.0.0.0", "255.255.255.252"};
    std::vector<Port> m_ports;
    std::map<std::pair<int, int>, Conn*> m_conns;
    std::vector<Ptr<EcmpRouting>> m_routing;
    std::set<std::pair<int, int>> m_down;                  // links down now (smaller node id first)
    std::map<std::pair<int, uint32_t>, int> m_ifaceFailure; // (node, interface) -> the failure that downed it
    std::vector<uint64_t> m_failureDrops;
    int m_cutLink = -1;
    int m_lastFailure = -1;
    int m_cutSrc = -1;
    int m_cutDst = -1;
    std::map<Socket*, Conn*> m_bySocket;
    std::map<Socket*, std::pair<int, int>> m_rxConn;
    std::vector<uint64_t> m_doneId;
    std::vector<int64_t> m_doneNs;
    std::vector<uint16_t> m_doneSport;
};
} // namespace astra_ns3
