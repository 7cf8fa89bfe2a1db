// Routing for astra_ns3 (compiled before glue.cc; see glue.py): shortest paths through
// switches with per-flow ECMP, as an ns-3 routing protocol, and the computation of its tables (ComputeRoutes).
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
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

struct Adjacent
{
    int peer;
    uint32_t iface;     // this node's interface on the link
    Ipv4Address gateway; // the peer's address on the link
};

// Fills every node's EcmpRouting with its next hops towards every host over the links not in `down` (node pairs,
// smaller id first): per destination host, hop counts over paths that cross switches only (hosts do not
// forward); a node's next hops are its neighbours one hop closer. Run at the start and after a link goes down.
void ComputeRoutes(std::vector<Ptr<EcmpRouting>>& routing, std::map<int, std::vector<Adjacent>>& adjacent,
                   const std::vector<bool>& isSwitch, std::map<int, std::vector<Ipv4Address>>& hostAddrs,
                   const std::set<std::pair<int, int>>& down)
{
    auto isDown = [&down](int a, int b) { return down.count(std::make_pair(std::min(a, b), std::max(a, b))) > 0; };
    int count = int(routing.size());
    for (int n = 0; n < count; n++)
    {
        routing[n]->m_routes.clear();
    }
    for (int d = 0; d < count; d++)
    {
        if (isSwitch[d])
        {
            continue;
        }
        std::vector<int> dist(count, -1);
        std::vector<int> queue{d};
        dist[d] = 0;
        for (size_t i = 0; i < queue.size(); i++)
        {
            int node = queue[i];
            if (node != d && !isSwitch[node])
            {
                continue; // hosts do not forward
            }
            for (const Adjacent& adj : adjacent[node])
            {
                if (dist[adj.peer] < 0 && !isDown(node, adj.peer))
                {
                    dist[adj.peer] = dist[node] + 1;
                    queue.push_back(adj.peer);
                }
            }
        }
        for (int n = 0; n < count; n++)
        {
            if (n == d || dist[n] < 0)
            {
                continue;
            }
            std::vector<std::pair<uint32_t, Ipv4Address>> hops;
            for (const Adjacent& adj : adjacent[n])
            {
                if (dist[adj.peer] == dist[n] - 1 && (adj.peer == d || isSwitch[adj.peer]) && !isDown(n, adj.peer))
                {
                    hops.emplace_back(adj.iface, adj.gateway);
                }
            }
            for (const Ipv4Address& addr : hostAddrs[d])
            {
                routing[n]->m_routes[addr.Get()] = hops;
            }
        }
    }
}
} // namespace astra_ns3
