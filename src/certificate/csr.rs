//! Private keys and certificate signing requests for the kubelet's client and serving
//! certificates, as the Go kubelet makes them (k8s.io/client-go `util/certificate`,
//! `util/cert.MakeCSR`, k/k `pkg/kubelet/certificate/bootstrap.requestNodeCertificate`).

use super::CertError;
use rcgen::{KeyPair, PublicKeyData};
use std::net::IpAddr;

/// signerName of node client certificates (`certificatesv1.KubeAPIServerClientKubeletSignerName`),
/// approved by kube-controller-manager's csrapproving controller.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// signerName of kubelet serving certificates (`certificatesv1.KubeletServingSignerName`); the
/// built-in approver does NOT approve these (kubeadm documents manual or third-party approval).
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// Which certificate a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The node's client certificate (`kubelet-client-*.pem`).
    Client,
    /// The kubelet server's serving certificate (`kubelet-server-*.pem`).
    Serving,
}

impl Kind {
    /// The signerName of this kind's CSRs.
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => CLIENT_SIGNER,
            Kind::Serving => SERVING_SIGNER,
        }
    }

    /// The key usages requested for an ECDSA key (client-go `DefaultKubeletClientGetUsages` /
    /// `DefaultKubeletServingGetUsages` without key encipherment, which only RSA keys get).
    pub fn usages(self) -> &'static [&'static str] {
        match self {
            Kind::Client => &["digital signature", "client auth"],
            Kind::Serving => &["digital signature", "server auth"],
        }
    }

    /// The file store's name prefix (`kubelet-client`, `kubelet-server`).
    pub fn store_prefix(self) -> &'static str {
        match self {
            Kind::Client => "kubelet-client",
            Kind::Serving => "kubelet-server",
        }
    }
}

/// What a certificate must say: the Go kubelet's `x509.CertificateRequest` template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    /// Subject CN, `system:node:<node>`.
    pub common_name: String,
    /// Subject O, `[system:nodes]`.
    pub organizations: Vec<String>,
    /// DNS SANs (serving certificates only), sorted.
    pub dns_names: Vec<String>,
    /// IP SANs (serving certificates only), sorted.
    pub ips: Vec<IpAddr>,
}

impl Template {
    /// The client certificate template of a node.
    pub fn client(node: &str) -> Template {
        Template {
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            ..Default::default()
        }
    }

    /// The serving certificate template (k/k `pkg/kubelet/certificate.newGetTemplateFn`): the
    /// hostname as a DNS SAN (an IP-looking hostname becomes an IP SAN), the node IPs as IP
    /// SANs, de-duplicated and sorted. `None` without any IP, as the Go kubelet (which then
    /// requests nothing).
    pub fn serving(node: &str, hostname: &str, node_ips: &[IpAddr]) -> Option<Template> {
        let mut dns = Vec::new();
        let mut ips: Vec<IpAddr> = node_ips.to_vec();
        if !hostname.is_empty() {
            match hostname.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => dns.push(hostname.to_string()),
            }
        }
        if ips.is_empty() {
            return None;
        }
        dns.sort();
        dns.dedup();
        ips.sort_by_key(|ip| ip.to_string());
        ips.dedup();
        Some(Template {
            dns_names: dns,
            ips,
            ..Template::client(node)
        })
    }
}

/// Generates the key the Go kubelet generates for its certificates: ECDSA P-256
/// (client-go `keyutil.MakeEllipticPrivateKeyPEM`). Serialized as PKCS#8 (`PRIVATE KEY`), which
/// the Go kubelet and kube-rs read as well as SEC1.
pub fn generate_key() -> Result<KeyPair, CertError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CertError::Crypto(e.to_string()))
}

/// A PEM `CERTIFICATE REQUEST` for the template, signed with the key.
pub fn make_csr_pem(key: &KeyPair, t: &Template) -> Result<String, CertError> {
    let crypto = |e: rcgen::Error| CertError::Crypto(e.to_string());
    let mut sans: Vec<String> = t.dns_names.clone();
    sans.extend(t.ips.iter().map(|ip| ip.to_string()));
    let mut params = rcgen::CertificateParams::new(sans).map_err(crypto)?;
    let mut dn = rcgen::DistinguishedName::new();
    for o in &t.organizations {
        dn.push(rcgen::DnType::OrganizationName, o.clone());
    }
    dn.push(rcgen::DnType::CommonName, t.common_name.clone());
    params.distinguished_name = dn;
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(crypto)
}

/// The CSR name the Go kubelet gives its bootstrap request (`bootstrap.digestedName`):
/// `node-csr-` + base64url(SHA-512/256 over base64url(SPKI)|CN|O...|usages...|), so a restarted
/// bootstrap finds its own earlier request instead of piling up new ones.
pub fn digested_name(spki_der: &[u8], t: &Template, usages: &[&str]) -> String {
    use base64::Engine;
    let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |data: &[u8]| {
        ctx.update(enc(data).as_bytes());
        ctx.update(b"|");
    };
    write(spki_der);
    write(t.common_name.as_bytes());
    for o in &t.organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", enc(ctx.finish().as_ref()))
}

/// The DER SubjectPublicKeyInfo of a key (what `x509.MarshalPKIXPublicKey` returns).
pub fn spki_der(key: &KeyPair) -> Vec<u8> {
    key.subject_public_key_info()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_csr_carries_node_identity_and_no_sans() {
        use x509_parser::prelude::FromDer;
        let key = generate_key().unwrap();
        let pem = make_csr_pem(&key, &Template::client("node-a")).unwrap();
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
            .map(|d: rustls::pki_types::CertificateSigningRequestDer<'static>| d)
            .unwrap();
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
                .unwrap();
        let subject = csr.certification_request_info.subject.to_string();
        assert!(subject.contains("CN=system:node:node-a"), "{subject}");
        assert!(subject.contains("O=system:nodes"), "{subject}");
        assert!(csr
            .requested_extensions()
            .is_none_or(|mut e| e.next().is_none()));
        // ECDSA P-256, as the Go kubelet's keyutil.MakeEllipticPrivateKeyPEM
        assert!(key
            .serialize_pem()
            .starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_eq!(key.algorithm(), &rcgen::PKCS_ECDSA_P256_SHA256);
    }

    #[test]
    fn serving_template_is_hostname_and_ips_sorted_and_deduplicated() {
        let ips: Vec<IpAddr> = vec!["10.250.0.2".parse().unwrap(), "10.250.0.1".parse().unwrap()];
        let t = Template::serving("n1", "n1.example", &ips).unwrap();
        assert_eq!(t.dns_names, vec!["n1.example"]);
        assert_eq!(t.ips, vec![ips[1], ips[0]]);
        assert_eq!(t.common_name, "system:node:n1");
        let t = Template::serving("n1", "10.250.0.1", &ips[1..]).unwrap();
        assert!(t.dns_names.is_empty());
        assert_eq!(t.ips.len(), 1);
        assert_eq!(
            Template::serving("n1", "n1", &[]),
            None,
            "no IP: nothing requested"
        );
    }

    #[test]
    fn digested_name_is_stable_for_the_same_key_and_differs_for_another() {
        let k1 = generate_key().unwrap();
        let k2 = generate_key().unwrap();
        let t = Template::client("n");
        let u = Kind::Client.usages();
        let a = digested_name(&spki_der(&k1), &t, u);
        assert_eq!(a, digested_name(&spki_der(&k1), &t, u));
        assert_ne!(a, digested_name(&spki_der(&k2), &t, u));
        assert!(a.starts_with("node-csr-"));
        // 32-byte digest, base64url without padding
        assert_eq!(a.len(), "node-csr-".len() + 43);
    }
}
