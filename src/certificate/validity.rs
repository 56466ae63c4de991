//! Pure decisions about certificates: is a certificate still usable, does it still match what
//! the node would request, and when it is rotated (client-go `util/certificate`
//! `nextRotationDeadline`/`jitteryDuration`, k/k `bootstrap.isClientConfigStillValid`).

use super::csr::Template;
use super::CertError;
use chrono::{DateTime, TimeZone, Utc};
use std::net::IpAddr;
use std::time::Duration;

/// What deckhand needs to know of a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: DateTime<Utc>,
    /// End of validity.
    pub not_after: DateTime<Utc>,
    /// Subject CN.
    pub common_name: String,
    /// Subject O values.
    pub organizations: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP SANs.
    pub ips: Vec<IpAddr>,
}

/// Parses every `CERTIFICATE` block of a PEM text (key blocks are skipped).
///
/// Errors: no certificate, or one that is not valid X.509.
pub fn parse_certs_pem(pem: &[u8]) -> Result<Vec<CertInfo>, CertError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let ders: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Parse(e.to_string()))?;
    if ders.is_empty() {
        return Err(CertError::Parse("no CERTIFICATE block".into()));
    }
    ders.iter().map(|d| cert_info(d.as_ref())).collect()
}

fn cert_info(der: &[u8]) -> Result<CertInfo, CertError> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Parse(e.to_string()))?;
    let ts = |t: x509_parser::time::ASN1Time| {
        Utc.timestamp_opt(t.timestamp(), 0)
            .single()
            .ok_or_else(|| CertError::Parse("validity time out of range".into()))
    };
    let subject = cert.subject();
    let strs = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        it.filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default())),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default())),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let common_name = strs(&mut subject.iter_common_name())
        .into_iter()
        .next()
        .unwrap_or_default();
    let organizations = strs(&mut subject.iter_organization());
    let info = CertInfo {
        not_before: ts(cert.validity().not_before)?,
        not_after: ts(cert.validity().not_after)?,
        common_name,
        organizations,
        dns_names,
        ips,
    };
    Ok(info)
}

/// A kubeconfig's client certificate is still usable when no certificate of its chain has
/// expired (the Go kubelet's `isClientConfigStillValid` checks exactly `now > NotAfter`).
pub fn still_valid(chain: &[CertInfo], now: DateTime<Utc>) -> bool {
    !chain.is_empty() && chain.iter().all(|c| now <= c.not_after)
}

/// Does the certificate say what the template asks (subject, and for serving certificates the
/// same DNS and IP SANs)? A certificate that does not is rotated at once (client-go
/// `certSatisfiesTemplateLocked`).
pub fn satisfies_template(cert: &CertInfo, t: &Template) -> bool {
    let mut dns = cert.dns_names.clone();
    dns.sort();
    let mut ips = cert.ips.clone();
    ips.sort_by_key(|ip| ip.to_string());
    let mut tdns = t.dns_names.clone();
    tdns.sort();
    let mut tips = t.ips.clone();
    tips.sort_by_key(|ip| ip.to_string());
    cert.common_name == t.common_name
        && cert.organizations == t.organizations
        && dns == tdns
        && ips == tips
}

/// When a certificate is renewed: at 70–90 % of its lifetime, `jitter` in [0, 1) choosing the
/// point (client-go `jitteryDuration`: `wait.Jitter(total, 0.2) - 0.3*total`), so nodes that
/// joined together do not all rotate at once.
pub fn rotation_deadline(cert: &CertInfo, jitter: f64) -> DateTime<Utc> {
    let total = (cert.not_after - cert.not_before)
        .to_std()
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let fraction = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    let offset = chrono::Duration::milliseconds((total * fraction * 1000.0).round() as i64);
    cert.not_before + offset
}

/// How long to wait from `now` until the rotation deadline (zero when it has passed or the
/// certificate no longer matches the template).
pub fn time_until_rotation(
    cert: &CertInfo,
    t: Option<&Template>,
    jitter: f64,
    now: DateTime<Utc>,
) -> Duration {
    if let Some(t) = t {
        if !satisfies_template(cert, t) {
            return Duration::ZERO;
        }
    }
    (rotation_deadline(cert, jitter) - now)
        .to_std()
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(start: i64, end: i64) -> CertInfo {
        CertInfo {
            not_before: Utc.timestamp_opt(start, 0).unwrap(),
            not_after: Utc.timestamp_opt(end, 0).unwrap(),
            common_name: "system:node:n".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec![],
            ips: vec![],
        }
    }

    #[test]
    fn rotation_happens_between_70_and_90_percent_of_the_lifetime() {
        let c = info(0, 1000);
        assert_eq!(rotation_deadline(&c, 0.0).timestamp(), 700);
        assert_eq!(rotation_deadline(&c, 0.5).timestamp(), 800);
        assert_eq!(rotation_deadline(&c, 0.99).timestamp(), 898);
        assert_eq!(
            rotation_deadline(&c, 7.0).timestamp(),
            900,
            "jitter is clamped"
        );
    }

    #[test]
    fn time_until_rotation_is_zero_when_past_or_when_the_template_changed() {
        let c = info(0, 1000);
        let at = |s| Utc.timestamp_opt(s, 0).unwrap();
        assert_eq!(
            time_until_rotation(&c, None, 0.0, at(600)),
            Duration::from_secs(100)
        );
        assert_eq!(time_until_rotation(&c, None, 0.0, at(950)), Duration::ZERO);
        let t = Template::client("other");
        assert_eq!(
            time_until_rotation(&c, Some(&t), 0.0, at(0)),
            Duration::ZERO
        );
        let t = Template::client("n");
        assert_eq!(
            time_until_rotation(&c, Some(&t), 0.0, at(0)),
            Duration::from_secs(700)
        );
    }

    #[test]
    fn expired_certificates_are_not_usable() {
        let at = |s| Utc.timestamp_opt(s, 0).unwrap();
        assert!(still_valid(&[info(0, 100)], at(100)));
        assert!(!still_valid(&[info(0, 100)], at(101)));
        assert!(
            !still_valid(&[info(0, 1000), info(0, 100)], at(500)),
            "every cert of the chain"
        );
        assert!(!still_valid(&[], at(0)));
    }

    #[test]
    fn serving_template_match_ignores_san_order() {
        let mut c = info(0, 1);
        c.dns_names = vec!["b".into(), "a".into()];
        c.ips = vec!["10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()];
        let t = Template {
            common_name: c.common_name.clone(),
            organizations: c.organizations.clone(),
            dns_names: vec!["a".into(), "b".into()],
            ips: vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()],
        };
        assert!(satisfies_template(&c, &t));
        let mut t2 = t.clone();
        t2.ips.pop();
        assert!(!satisfies_template(&c, &t2));
    }

    #[test]
    fn parses_a_self_signed_certificate() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["n1".into(), "10.250.0.1".into()]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        let cert = p.self_signed(&key).unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        let infos = parse_certs_pem(pem.as_bytes()).unwrap();
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].common_name, "system:node:n1");
        assert_eq!(infos[0].organizations, vec!["system:nodes"]);
        assert_eq!(infos[0].dns_names, vec!["n1"]);
        assert_eq!(infos[0].ips, vec!["10.250.0.1".parse::<IpAddr>().unwrap()]);
        assert!(parse_certs_pem(key.serialize_pem().as_bytes()).is_err());
    }
}
