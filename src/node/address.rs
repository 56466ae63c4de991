//! The node's InternalIP addresses: `--node-ip` parsed and validated, or, when it is unset or
//! `0.0.0.0`/`::`, chosen as the Go kubelet's NodeAddress setter does (k/k
//! `pkg/kubelet/nodestatus/setters.go` NodeAddress, `kubelet_node_status.go` validateNodeIP,
//! k8s.io/component-helpers `node/util/ips.go` ParseNodeIPArgument, k8s.io/apimachinery
//! `util/net/interface.go` ChooseHostInterface).
//!
//! [`select_node_ips`] is pure over what [`HostAddrs::read`] and a DNS lookup of the node name
//! found on the machine; the I/O is in [`detect`].

use std::net::IpAddr;

/// What the machine offers: each interface's addresses, and the interfaces of its default
/// routes (`/proc/net/route`, `/proc/net/ipv6_route`) in table order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddrs {
    /// (interface name, address) for every address of every interface that is up.
    pub addrs: Vec<(String, IpAddr)>,
    /// Interfaces with an IPv4 default route.
    pub default_v4: Vec<String>,
    /// Interfaces with an IPv6 default route.
    pub default_v6: Vec<String>,
}

/// Parses `--node-ip` (k8s.io/component-helpers ParseNodeIPArgument, without a cloud provider):
/// empty → none; one address; or a dual-stack pair `a,b` of different families, neither of them
/// `0.0.0.0`/`::`. Spaces around addresses are ignored; an unparsable entry is an error (the Go
/// kubelet only warns and drops it; deckhand never guesses behind a typo).
pub fn parse_node_ip_arg(s: &str) -> Result<Vec<IpAddr>, String> {
    if s.trim().is_empty() {
        return Ok(vec![]);
    }
    let mut ips = vec![];
    for part in s.split(',') {
        let p = part.trim();
        ips.push(
            p.parse::<IpAddr>()
                .map_err(|_| format!("--node-ip: could not parse {p:?}"))?,
        );
    }
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv6() == ips[1].is_ipv6()) {
        return Err(
            "--node-ip: must contain either a single IP or a dual-stack pair of IPs".into(),
        );
    }
    if ips.len() == 2 && (ips[0].is_unspecified() || ips[1].is_unspecified()) {
        return Err("--node-ip: dual-stack node IP cannot include '0.0.0.0' or '::'".into());
    }
    Ok(ips)
}

fn is_link_local_unicast(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => v.is_link_local(),
        IpAddr::V6(v) => (v.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// Go's `net.IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local or broadcast.
fn is_global_unicast(ip: &IpAddr) -> bool {
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || is_link_local_unicast(ip)
        || matches!(ip, IpAddr::V4(v) if v.is_broadcast()))
}

/// Whether `ip` may be the node's address (k/k validateNodeIP): not loopback, multicast,
/// link-local or all zeros, and held by one of the machine's interfaces. Errors in the Go
/// kubelet's words.
pub fn validate_node_ip(ip: IpAddr, host: &HostAddrs) -> Result<(), String> {
    if ip.is_loopback() {
        return Err("nodeIP can't be loopback address".into());
    }
    if ip.is_multicast() {
        return Err("nodeIP can't be a multicast address".into());
    }
    if is_link_local_unicast(&ip) {
        return Err("nodeIP can't be a link-local unicast address".into());
    }
    if ip.is_unspecified() {
        return Err("nodeIP can't be an all zeros address".into());
    }
    if host.addrs.iter().any(|(_, a)| *a == ip) {
        Ok(())
    } else {
        Err(format!(
            "node IP: {:?} not found in the host's network interfaces",
            ip.to_string()
        ))
    }
}

/// The node's addresses (k/k NodeAddress): the `--node-ip` addresses when given and not
/// `0.0.0.0`/`::` (validated); else the node name if it is an address; else the first valid
/// address `resolved` for the node name in DNS, of the preferred family if any (IPv4, or IPv6
/// when `--node-ip` is `::`); else the address of a default route's interface
/// ([`choose_host_interface`]).
pub fn select_node_ips(
    node_ips: &[IpAddr],
    node_name: &str,
    resolved: &[IpAddr],
    host: &HostAddrs,
) -> Result<Vec<IpAddr>, String> {
    let first = node_ips.first().copied();
    let specified = first.filter(|ip| !ip.is_unspecified());
    if let Some(ip) = specified {
        validate_node_ip(ip, host).map_err(|e| format!("failed to validate nodeIP: {e}"))?;
        let mut out = vec![ip];
        if let Some(second) = node_ips.get(1).copied().filter(|ip| !ip.is_unspecified()) {
            validate_node_ip(second, host)
                .map_err(|e| format!("failed to validate secondaryNodeIP: {e}"))?;
            out.push(second);
        }
        return Ok(out);
    }
    let prefer_v4 = first.is_none_or(|ip| ip.is_ipv4());
    if let Ok(ip) = node_name.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let mut chosen = None;
    for ip in resolved {
        if validate_node_ip(*ip, host).is_ok() {
            if ip.is_ipv4() == prefer_v4 {
                chosen = Some(*ip);
                break;
            } else if chosen.is_none() {
                chosen = Some(*ip);
            }
        }
    }
    chosen
        .or_else(|| choose_host_interface(host, prefer_v4))
        .map(|ip| vec![ip])
        .ok_or_else(|| {
            format!("can't get ip address of node {node_name}: no --node-ip, the name does not resolve to an address of this machine, and no default route")
        })
}

/// The address a default route's interface holds (k8s.io/apimachinery ChooseHostInterface):
/// families in order of preference, for each its default routes in table order, the first
/// global unicast address of that family on the route's interface; failing that, the first
/// global unicast address of any interface.
pub fn choose_host_interface(host: &HostAddrs, prefer_v4: bool) -> Option<IpAddr> {
    let families = if prefer_v4 {
        [true, false]
    } else {
        [false, true]
    };
    for v4 in families {
        let routes = if v4 {
            &host.default_v4
        } else {
            &host.default_v6
        };
        for ifname in routes {
            if let Some((_, ip)) = host
                .addrs
                .iter()
                .find(|(n, ip)| n == ifname && ip.is_ipv4() == v4 && is_global_unicast(ip))
            {
                return Some(*ip);
            }
        }
    }
    families.iter().find_map(|v4| {
        host.addrs
            .iter()
            .find(|(_, ip)| ip.is_ipv4() == *v4 && is_global_unicast(ip))
            .map(|(_, ip)| *ip)
    })
}

/// The interfaces of the IPv4 default routes in `/proc/net/route` text (destination and mask
/// 00000000).
pub fn parse_proc_route_v4(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[1] == "00000000" && f[7] == "00000000").then(|| f[0].to_string())
        })
        .collect()
}

/// The interfaces of the IPv6 default routes in `/proc/net/ipv6_route` text (destination ::/0),
/// leaving out the loopback device that holds unreachable routes.
pub fn parse_proc_route_v6(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 10 && f[0].chars().all(|c| c == '0') && f[1] == "00" && f[9] != "lo")
                .then(|| f[9].to_string())
        })
        .collect()
}

impl HostAddrs {
    /// Reads the machine's interface addresses (getifaddrs, interfaces that are up) and default
    /// routes.
    pub fn read() -> Self {
        use nix::net::if_::InterfaceFlags;
        let mut addrs = vec![];
        if let Ok(ifs) = nix::ifaddrs::getifaddrs() {
            for i in ifs {
                if !i.flags.contains(InterfaceFlags::IFF_UP) {
                    continue;
                }
                let Some(a) = i.address else { continue };
                if let Some(v4) = a.as_sockaddr_in() {
                    addrs.push((i.interface_name.clone(), IpAddr::V4(v4.ip())));
                } else if let Some(v6) = a.as_sockaddr_in6() {
                    addrs.push((i.interface_name.clone(), IpAddr::V6(v6.ip())));
                }
            }
        }
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        HostAddrs {
            addrs,
            default_v4: parse_proc_route_v4(&read("/proc/net/route")),
            default_v6: parse_proc_route_v6(&read("/proc/net/ipv6_route")),
        }
    }
}

/// The node's addresses from the `--node-ip` value `arg` (see [`select_node_ips`]): resolves
/// `node_name` (getaddrinfo, off the async threads) only when no address was given.
pub async fn detect(arg: &str, node_name: &str) -> Result<Vec<IpAddr>, String> {
    let node_ips = parse_node_ip_arg(arg)?;
    let name = node_name.to_string();
    let need_lookup = node_ips.first().is_none_or(|ip| ip.is_unspecified())
        && node_name.parse::<IpAddr>().is_err();
    let (host, resolved) = tokio::task::spawn_blocking(move || {
        let resolved = if need_lookup {
            use std::net::ToSocketAddrs;
            (name.as_str(), 0)
                .to_socket_addrs()
                .map(|it| it.map(|a| a.ip()).collect::<Vec<_>>())
                .unwrap_or_default()
        } else {
            vec![]
        };
        (HostAddrs::read(), resolved)
    })
    .await
    .map_err(|e| format!("reading the machine's addresses: {e}"))?;
    select_node_ips(&node_ips, node_name, &resolved, &host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn host() -> HostAddrs {
        HostAddrs {
            addrs: vec![
                ("lo".into(), ip("127.0.0.1")),
                ("lo".into(), ip("::1")),
                ("eth0".into(), ip("192.0.2.10")),
                ("eth0".into(), ip("fe80::1")),
                ("eth0".into(), ip("2001:db8::10")),
                ("dummy0".into(), ip("10.250.0.1")),
                ("eth1".into(), ip("198.51.100.7")),
            ],
            default_v4: vec!["eth1".into()],
            default_v6: vec!["eth0".into()],
        }
    }

    #[test]
    fn node_ip_argument_accepts_one_address_or_a_dual_stack_pair() {
        assert_eq!(parse_node_ip_arg("").unwrap(), Vec::<IpAddr>::new());
        assert_eq!(parse_node_ip_arg("10.0.0.1").unwrap(), vec![ip("10.0.0.1")]);
        assert_eq!(
            parse_node_ip_arg("10.0.0.1, 2001:db8::1").unwrap(),
            vec![ip("10.0.0.1"), ip("2001:db8::1")]
        );
        assert_eq!(parse_node_ip_arg("::").unwrap(), vec![ip("::")]);
        assert_eq!(parse_node_ip_arg("0.0.0.0").unwrap(), vec![ip("0.0.0.0")]);
        assert!(parse_node_ip_arg("10.0.0.1,10.0.0.2")
            .unwrap_err()
            .contains("single IP or a dual-stack pair"));
        assert!(parse_node_ip_arg("10.0.0.1,2001:db8::1,10.0.0.2").is_err());
        assert!(parse_node_ip_arg("0.0.0.0,::1")
            .unwrap_err()
            .contains("cannot include '0.0.0.0' or '::'"));
        assert!(parse_node_ip_arg("10.0.0.300")
            .unwrap_err()
            .contains("could not parse"));
    }

    #[test]
    fn given_node_ips_are_validated_and_kept_in_order() {
        let h = host();
        assert_eq!(
            select_node_ips(&[ip("10.250.0.1")], "vm", &[], &h).unwrap(),
            vec![ip("10.250.0.1")]
        );
        assert_eq!(
            select_node_ips(&[ip("2001:db8::10"), ip("10.250.0.1")], "vm", &[], &h).unwrap(),
            vec![ip("2001:db8::10"), ip("10.250.0.1")]
        );
        let e = select_node_ips(&[ip("10.9.9.9")], "vm", &[], &h).unwrap_err();
        assert!(
            e.contains("not found in the host's network interfaces"),
            "{e}"
        );
        assert!(select_node_ips(&[ip("127.0.0.1")], "vm", &[], &h)
            .unwrap_err()
            .contains("loopback"));
        assert!(select_node_ips(&[ip("fe80::1")], "vm", &[], &h)
            .unwrap_err()
            .contains("link-local"));
        let e =
            select_node_ips(&[ip("10.250.0.1"), ip("2001:db8::99")], "vm", &[], &h).unwrap_err();
        assert!(e.contains("secondaryNodeIP"), "{e}");
    }

    #[test]
    fn without_node_ip_a_name_that_is_an_address_wins() {
        assert_eq!(
            select_node_ips(&[], "203.0.113.5", &[], &host()).unwrap(),
            vec![ip("203.0.113.5")]
        );
    }

    #[test]
    fn without_node_ip_the_name_resolves_to_a_valid_local_address_preferring_ipv4() {
        let h = host();
        let resolved = [ip("127.0.1.1"), ip("2001:db8::10"), ip("192.0.2.10")];
        assert_eq!(
            select_node_ips(&[], "vm", &resolved, &h).unwrap(),
            vec![ip("192.0.2.10")]
        );
        // `--node-ip ::` prefers IPv6
        assert_eq!(
            select_node_ips(&[ip("::")], "vm", &resolved, &h).unwrap(),
            vec![ip("2001:db8::10")]
        );
        // only the other family: taken
        assert_eq!(
            select_node_ips(&[], "vm", &[ip("2001:db8::10")], &h).unwrap(),
            vec![ip("2001:db8::10")]
        );
        // addresses that are not this machine's are skipped: the default route decides
        assert_eq!(
            select_node_ips(
                &[ip("0.0.0.0")],
                "vm",
                &[ip("127.0.1.1"), ip("10.1.1.1")],
                &h
            )
            .unwrap(),
            vec![ip("198.51.100.7")]
        );
    }

    #[test]
    fn without_node_ip_or_dns_the_default_route_interface_of_the_preferred_family_wins() {
        let h = host();
        assert_eq!(choose_host_interface(&h, true), Some(ip("198.51.100.7")));
        assert_eq!(choose_host_interface(&h, false), Some(ip("2001:db8::10")));
        assert_eq!(
            select_node_ips(&[ip("::")], "vm", &[], &h).unwrap(),
            vec![ip("2001:db8::10")]
        );
        // no IPv4 default route: the IPv6 one, before any interface without a route
        let no_v4 = HostAddrs {
            default_v4: vec![],
            ..host()
        };
        assert_eq!(
            choose_host_interface(&no_v4, true),
            Some(ip("2001:db8::10"))
        );
        // no default route at all: the first global unicast address of any interface
        let none = HostAddrs {
            default_v4: vec![],
            default_v6: vec![],
            ..host()
        };
        assert_eq!(choose_host_interface(&none, true), Some(ip("192.0.2.10")));
        let lo_only = HostAddrs {
            addrs: vec![("lo".into(), ip("127.0.0.1"))],
            ..Default::default()
        };
        assert!(select_node_ips(&[], "vm", &[], &lo_only)
            .unwrap_err()
            .contains("can't get ip address of node vm"));
    }

    #[test]
    fn proc_route_tables_give_the_default_route_interfaces() {
        let v4 =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(parse_proc_route_v4(v4), vec!["eth0".to_string()]);
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n\
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n\
20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n";
        assert_eq!(parse_proc_route_v6(v6), vec!["eth0".to_string()]);
    }
}
