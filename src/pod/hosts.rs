//! The kubelet-managed `/etc/hosts` of a pod (k/k `pkg/kubelet/kubelet_pods.go`
//! `managedHostsFileContent`, `GeneratePodHostNameAndDomain`): the content is a pure function
//! of the pod, its IP and the cluster domain; [`write`] puts it in the pod directory.

use k8s_openapi::api::core::v1::Pod;
use std::path::{Path, PathBuf};

const HEADER: &str = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n";

/// The managed hosts file for `pod` with IP `pod_ip`, or None when the kubelet does not manage
/// it (host-network pods, which see the node's file, and pods without an IP).
///
/// After the localhost lines: `<ip>\t<hostname>`, or with a `subdomain`
/// `<ip>\t<hostname>.<subdomain>.<ns>.svc.<cluster_domain>\t<hostname>`; then the pod's
/// `hostAliases` under `# Entries added by HostAliases.`.
pub fn managed_hosts_file(pod: &Pod, pod_ip: &str, cluster_domain: &str) -> Option<String> {
    if super::host_network(pod) || pod_ip.is_empty() {
        return None;
    }
    let host = super::spec::sandbox_hostname(pod);
    let mut content = String::from(HEADER);
    let spec = pod.spec.as_ref();
    match spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        Some(sub) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("");
            content.push_str(&format!(
                "{pod_ip}\t{host}.{sub}.{ns}.svc.{cluster_domain}\t{host}\n"
            ));
        }
        None => content.push_str(&format!("{pod_ip}\t{host}\n")),
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    if !aliases.is_empty() {
        content.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.as_deref().unwrap_or(&[]).join("\t");
            content.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    Some(content)
}

/// Writes `content` as `<pod_dir>/etc-hosts` (mode 0644) and returns its path.
///
/// Errors: the directory or file cannot be written.
pub async fn write(pod_dir: &Path, content: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = pod_dir.join("etc-hosts");
    tokio::fs::create_dir_all(pod_dir).await?;
    tokio::fs::write(&path, content).await?;
    tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).await?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{HostAlias, PodSpec};

    fn pod(spec: PodSpec) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-0".into());
        p.metadata.namespace = Some("shop".into());
        p.spec = Some(spec);
        p
    }

    #[test]
    fn plain_pod_gets_localhost_lines_and_its_own_name() {
        let c =
            managed_hosts_file(&pod(PodSpec::default()), "10.244.0.7", "cluster.local").unwrap();
        assert!(c.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            c.ends_with("fe00::2\tip6-allrouters\n10.244.0.7\tweb-0\n"),
            "{c}"
        );
    }

    #[test]
    fn subdomain_puts_the_fqdn_first() {
        let spec = PodSpec {
            hostname: Some("db".into()),
            subdomain: Some("backend".into()),
            ..Default::default()
        };
        let c = managed_hosts_file(&pod(spec), "10.244.0.8", "cluster.local").unwrap();
        assert!(
            c.ends_with("10.244.0.8\tdb.backend.shop.svc.cluster.local\tdb\n"),
            "{c}"
        );
    }

    #[test]
    fn host_aliases_follow_under_their_heading() {
        let spec = PodSpec {
            host_aliases: Some(vec![HostAlias {
                ip: "1.2.3.4".into(),
                hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
            }]),
            ..Default::default()
        };
        let c = managed_hosts_file(&pod(spec), "10.244.0.9", "cluster.local").unwrap();
        assert!(
            c.ends_with("\n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\tbar.local\n"),
            "{c}"
        );
    }

    #[test]
    fn host_network_and_ipless_pods_are_not_managed() {
        let hn = pod(PodSpec {
            host_network: Some(true),
            ..Default::default()
        });
        assert_eq!(
            managed_hosts_file(&hn, "192.168.1.2", "cluster.local"),
            None
        );
        assert_eq!(
            managed_hosts_file(&pod(PodSpec::default()), "", "cluster.local"),
            None
        );
    }
}
