// Routing for astra_ns3 (compiled at run time with cppyy.cppdef, before glue.cc): shortest paths through
// switches with per-flow ECMP, as an ns-3 routing protocol.
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace astra_ns3
{
using namespace ns3;

// Shortest-path routing with per-flow ECMP: every node forwards a packet to one of its next hops towards
// the destination, chosen by a hash of (source, destination, ports) and the node, so a TCP connection
// keeps one path (no reordering) and different connections spread over the equal-cost paths.
class EcmpRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("astra_ns3::EcmpRouting").SetParent<Ipv4RoutingProtocol>().SetGroupName("Internet");
        return tid;
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    uint32_t m_salt = 0;
    // destination address -> next hops (interface, gateway)
    std::map<uint32_t, std::vector<std::pair<uint32_t, Ipv4Address>>> m_routes;

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p, const Ipv4Header& header, Ptr<NetDevice>,
                               Socket::SocketErrno& sockerr) override
    {
        uint32_t ports = 0;
        if (p && p->GetSize() >= 4)
        {
            uint8_t buf[4];
            p->CopyData(buf, 4);
            ports = (uint32_t(buf[0]) << 24) | (uint32_t(buf[1]) << 16) | (uint32_t(buf[2]) << 8) | buf[3];
        }
        Ptr<Ipv4Route> route = Pick(header.GetSource().Get(), header.GetDestination(), ports, true);
        sockerr = route ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
        return route;
    }

    bool RouteInput(Ptr<const Packet> p, const Ipv4Header& header, Ptr<const NetDevice>,
                    const UnicastForwardCallback& ucb, const MulticastForwardCallback&,
                    const LocalDeliverCallback&, const ErrorCallback&) override
    {
        uint32_t ports = 0;
        if (p->GetSize() >= 4)
        {
            uint8_t buf[4];
            p->CopyData(buf, 4);
            ports = (uint32_t(buf[0]) << 24) | (uint32_t(buf[1]) << 16) | (uint32_t(buf[2]) << 8) | buf[3];
        }
        Ptr<Ipv4Route> route = Pick(header.GetSource().Get(), header.GetDestination(), ports, false);
        if (!route)
        {
            return false;
        }
        ucb(route, p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper> stream, Time::Unit) const override
    {
        *stream->GetStream() << "astra_ns3::EcmpRouting: " << m_routes.size() << " destinations\n";
    }

  private:
    static uint64_t Mix(uint64_t x)
    {
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return x ^ (x >> 31);
    }

    Ptr<Ipv4Route> Pick(uint32_t src, Ipv4Address dst, uint32_t ports, bool output)
    {
        auto it = m_routes.find(dst.Get());
        if (it == m_routes.end() || it->second.empty() || !m_ipv4)
        {
            return nullptr;
        }
        const auto& hops = it->second;
        size_t k = 0;
        if (hops.size() > 1)
        {
            // A locally sent packet's source is not chosen yet at connect time: hash without it there.
            uint64_t h = Mix(Mix(Mix(m_salt) ^ (output ? 0 : src)) ^ dst.Get());
            k = Mix(h ^ ports) % hops.size();
        }
        uint32_t iface = hops[k].first;
        Ptr<Ipv4Route> route = Create<Ipv4Route>();
        route->SetDestination(dst);
        route->SetGateway(hops[k].second);
        route->SetSource(m_ipv4->GetAddress(iface, 0).GetLocal());
        route->SetOutputDevice(m_ipv4->GetNetDevice(iface));
        return route;
    }

    Ptr<Ipv4> m_ipv4;
};
} // namespace astra_ns3
