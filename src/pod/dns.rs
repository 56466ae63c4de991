//! A pod's DNS configuration, the resolv.conf the runtime writes into the sandbox (k/k
//! `pkg/kubelet/network/dns/dns.go` `GetPodDNS`; doc page "DNS for Services and Pods", "Pod's
//! DNS Policy").
//!
//! - `ClusterFirst` (the default; for a hostNetwork pod it means `Default`): the cluster DNS
//!   servers, search `<ns>.svc.<domain> svc.<domain> <domain>` then the node's search paths,
//!   `options ndots:5`. Without `clusterDNS` the pod falls back to `Default` with a
//!   `MissingClusterDNS` warning.
//! - `ClusterFirstWithHostNet`: as ClusterFirst, also for hostNetwork pods.
//! - `Default`: the node's resolv.conf (`resolvConf`).
//! - `None`: only what `dnsConfig` says.
//!
//! `dnsConfig` nameservers, searches and options are then merged in, and the limits of the API
//! validation applied (3 nameservers, 32 search paths, 2048 characters of search line) with a
//! `DNSConfigForming` warning when something is dropped.

use crate::cri::api;
use k8s_openapi::api::core::v1::Pod;
use std::net::IpAddr;

/// Most nameservers a resolv.conf may list (k/k `validation.MaxDNSNameservers`).
pub const MAX_DNS_NAMESERVERS: usize = 3;
/// Most search paths (k/k `validation.MaxDNSSearchPaths`).
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
/// Most characters of the search line (k/k `validation.MaxDNSSearchListChars`).
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;

/// The node's DNS settings (KubeletConfiguration `clusterDNS`, `clusterDomain`, `resolvConf`).
#[derive(Debug, Clone, Default)]
pub struct DnsSettings {
    /// Cluster DNS server IPs; empty: none configured.
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster domain, e.g. `cluster.local`; empty: no cluster search paths.
    pub cluster_domain: String,
    /// The node's resolver configuration (parsed resolv.conf); None when `resolvConf` is "".
    pub host: Option<ResolvConf>,
    /// The node's IPs (for the loopback server used when `resolvConf` is "").
    pub node_ips: Vec<IpAddr>,
}

/// What a resolv.conf says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvConf {
    /// `nameserver` lines.
    pub servers: Vec<String>,
    /// The `search` (or `domain`) line's paths.
    pub searches: Vec<String>,
    /// `options` values, e.g. `ndots:2`.
    pub options: Vec<String>,
}

/// Parses resolv.conf text the way the Go kubelet does (`parseResolvConf`): the last `search`
/// line wins, `domain` counts as a search line, comments (`#`, `;`) are ignored, trailing dots
/// of search paths are kept except for a lone ".".
pub fn parse_resolv_conf(text: &str) -> ResolvConf {
    let mut rc = ResolvConf::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => rc.servers.extend(f.next().map(String::from)),
            Some("search") | Some("domain") => {
                rc.searches = f
                    .map(|s| {
                        if s == "." {
                            s.to_string()
                        } else {
                            s.trim_end_matches('.').to_string()
                        }
                    })
                    .collect()
            }
            Some("options") => rc.options.extend(f.map(String::from)),
            _ => {}
        }
    }
    rc
}

/// A warning the DNS configuration produced: `(reason, message)` for a pod event.
pub type DnsWarning = (&'static str, String);

fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// The sandbox DNS config for `pod`, and the warnings to record as pod events.
pub fn pod_dns(pod: &Pod, s: &DnsSettings) -> (api::DnsConfig, Vec<DnsWarning>) {
    let mut warnings = vec![];
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let host = s.host.clone().unwrap_or_default();
    let mut cfg = api::DnsConfig {
        servers: host.servers.clone(),
        searches: host.searches.clone(),
        options: host.options.clone(),
    };
    #[derive(PartialEq)]
    enum Kind {
        Cluster,
        Host,
        None,
    }
    let kind = match spec.dns_policy.as_deref() {
        Some("None") => Kind::None,
        Some("ClusterFirstWithHostNet") => Kind::Cluster,
        Some("Default") => Kind::Host,
        Some("ClusterFirst") | None if host_network => Kind::Host,
        _ => Kind::Cluster,
    };
    let mut use_host = kind == Kind::Host;
    match kind {
        Kind::None => cfg = api::DnsConfig::default(),
        Kind::Cluster if !s.cluster_dns.is_empty() => {
            cfg.servers = s.cluster_dns.iter().map(|ip| ip.to_string()).collect();
            if !s.cluster_domain.is_empty() {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("");
                let d = &s.cluster_domain;
                let mut searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
                searches.extend(host.searches.iter().cloned());
                cfg.searches = omit_duplicates(searches);
            }
            cfg.options = vec!["ndots:5".into()];
        }
        Kind::Cluster => {
            warnings.push((
                "MissingClusterDNS",
                format!(
                    "pod: {:?}. kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                    super::format_pod(pod)
                ),
            ));
            use_host = true;
        }
        Kind::Host => {}
    }
    if use_host && s.host.is_none() {
        cfg.servers = s
            .node_ips
            .iter()
            .map(|ip| if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string())
            .collect();
        if cfg.servers.is_empty() {
            cfg.servers.push("127.0.0.1".into());
        }
        cfg.searches = vec![".".into()];
    }
    if let Some(dc) = &spec.dns_config {
        let mut servers = cfg.servers.clone();
        servers.extend(dc.nameservers.iter().flatten().cloned());
        cfg.servers = omit_duplicates(servers);
        let mut searches = cfg.searches.clone();
        searches.extend(dc.searches.iter().flatten().cloned());
        cfg.searches = omit_duplicates(searches);
        // options: by name, the pod's replacing the node's / cluster defaults
        let mut opts: Vec<(String, Option<String>)> = cfg
            .options
            .iter()
            .map(|o| match o.split_once(':') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (o.clone(), None),
            })
            .collect();
        for o in dc.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            let val = o.value.clone();
            match opts.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = val,
                None => opts.push((name, val)),
            }
        }
        cfg.options = opts
            .into_iter()
            .map(|(n, v)| match v.filter(|v| !v.is_empty()) {
                Some(v) => format!("{n}:{v}"),
                None => n,
            })
            .collect();
    }
    // the limits of the API validation
    if cfg.servers.len() > MAX_DNS_NAMESERVERS {
        cfg.servers.truncate(MAX_DNS_NAMESERVERS);
        warnings.push((
            "DNSConfigForming",
            format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                cfg.servers.join(" ")
            ),
        ));
    }
    let mut exceeded = false;
    if cfg.searches.len() > MAX_DNS_SEARCH_PATHS {
        cfg.searches.truncate(MAX_DNS_SEARCH_PATHS);
        exceeded = true;
    }
    let before = cfg.searches.len();
    cfg.searches.retain(|s| s.len() <= 253);
    exceeded |= cfg.searches.len() != before;
    while cfg.searches.join(" ").len() > MAX_DNS_SEARCH_LIST_CHARS {
        cfg.searches.pop();
        exceeded = true;
    }
    if exceeded {
        warnings.push((
            "DNSConfigForming",
            format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                cfg.searches.join(" ")
            ),
        ));
    }
    (cfg, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption, PodSpec};
    use kube::api::ObjectMeta;

    fn pod(policy: Option<&str>, host_network: bool, dc: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("team".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(String::from),
                host_network: Some(host_network),
                dns_config: dc,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn settings() -> DnsSettings {
        DnsSettings {
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            host: Some(parse_resolv_conf(
                "# host\nnameserver 192.0.2.53\nsearch corp.example. lab\noptions timeout:2\n",
            )),
            node_ips: vec!["10.250.0.1".parse().unwrap()],
        }
    }

    #[test]
    fn cluster_first_writes_cluster_servers_searches_and_ndots() {
        let (c, w) = pod_dns(&pod(Some("ClusterFirst"), false, None), &settings());
        assert_eq!(c.servers, vec!["10.96.0.10"]);
        assert_eq!(
            c.searches,
            vec![
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab"
            ]
        );
        assert_eq!(c.options, vec!["ndots:5"]);
        assert!(w.is_empty());
    }

    #[test]
    fn host_network_cluster_first_uses_the_node_resolv_conf_unless_with_host_net() {
        let (c, _) = pod_dns(&pod(None, true, None), &settings());
        assert_eq!(c.servers, vec!["192.0.2.53"]);
        assert_eq!(c.options, vec!["timeout:2"]);
        let (c, _) = pod_dns(
            &pod(Some("ClusterFirstWithHostNet"), true, None),
            &settings(),
        );
        assert_eq!(c.servers, vec!["10.96.0.10"]);
        let (c, _) = pod_dns(&pod(Some("Default"), false, None), &settings());
        assert_eq!(c.searches, vec!["corp.example", "lab"]);
    }

    #[test]
    fn none_takes_only_dns_config_and_options_merge_by_name() {
        let dc = PodDNSConfig {
            nameservers: Some(vec!["1.2.3.4".into()]),
            searches: Some(vec!["a.example".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        };
        let (c, _) = pod_dns(&pod(Some("None"), false, Some(dc.clone())), &settings());
        assert_eq!(c.servers, vec!["1.2.3.4"]);
        assert_eq!(c.searches, vec!["a.example"]);
        assert_eq!(c.options, vec!["ndots:2", "edns0"]);
        let (c, _) = pod_dns(&pod(None, false, Some(dc)), &settings());
        assert_eq!(c.servers, vec!["10.96.0.10", "1.2.3.4"]);
        assert_eq!(c.options, vec!["ndots:2", "edns0"]);
    }

    #[test]
    fn missing_cluster_dns_falls_back_with_a_warning_and_limits_are_applied() {
        let mut s = settings();
        s.cluster_dns.clear();
        let (c, w) = pod_dns(&pod(None, false, None), &s);
        assert_eq!(c.servers, vec!["192.0.2.53"]);
        assert_eq!(w[0].0, "MissingClusterDNS");
        let dc = PodDNSConfig {
            nameservers: Some(vec!["1.1.1.1".into(), "2.2.2.2".into(), "3.3.3.3".into()]),
            ..Default::default()
        };
        let (c, w) = pod_dns(&pod(None, false, Some(dc)), &settings());
        assert_eq!(c.servers.len(), 3);
        assert!(w.iter().any(|(r, m)| *r == "DNSConfigForming"
            && m.ends_with("the applied nameserver line is: 10.96.0.10 1.1.1.1 2.2.2.2")));
        let mut s = settings();
        s.host = None;
        let (c, _) = pod_dns(&pod(Some("Default"), false, None), &s);
        assert_eq!(c.servers, vec!["127.0.0.1"]);
        assert_eq!(c.searches, vec!["."]);
    }
}
