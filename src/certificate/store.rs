//! Certificate files as the Go kubelet keeps them (client-go `util/certificate` `fileStore`):
//! `<cert-dir>/<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` holding the certificate chain then the key
//! (mode 0600), and the symlink `<prefix>-current.pem` to the newest, replaced atomically
//! through `<prefix>-updated.pem`. Also the node kubeconfig that points at the current pem
//! (k/k `bootstrap.writeKubeconfigFromBootstrapping`).

use super::validity::{parse_certs_pem, CertInfo};
use super::CertError;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// One kind's certificate files in the cert directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: String,
}

/// The current certificate and key, as stored.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The certificate chain (PEM `CERTIFICATE` blocks).
    pub cert_pem: String,
    /// The private key (PEM).
    pub key_pem: String,
    /// The parsed chain, leaf first.
    pub chain: Vec<CertInfo>,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> CertError + '_ {
    move |e| CertError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Writes a file with mode 0600 through a temporary file and a rename.
pub(crate) fn write_private(path: &Path, data: &[u8]) -> Result<(), CertError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(data).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

impl FileStore {
    /// The store of `prefix` (`kubelet-client`, `kubelet-server`) in `dir`.
    pub fn new(dir: impl Into<PathBuf>, prefix: &str) -> FileStore {
        FileStore {
            dir: dir.into(),
            prefix: prefix.to_string(),
        }
    }

    /// `<dir>/<prefix>-current.pem` (the path the kubeconfig names).
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// Reads the current pair. `Ok(None)` when there is none; an error when it is unreadable.
    pub fn current(&self) -> Result<Option<Stored>, CertError> {
        let path = self.current_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        split_pem(&text).map(Some).map_err(|e| CertError::Io {
            path,
            reason: e.to_string(),
        })
    }

    /// Stores a new pair as `<prefix>-<local time>.pem` and points `<prefix>-current.pem` at
    /// it. Returns the new file's path.
    pub fn update(&self, cert_pem: &str, key_pem: &str) -> Result<PathBuf, CertError> {
        // validate before anything is replaced
        parse_certs_pem(cert_pem.as_bytes())?;
        let ts = chrono::Local::now().format("%Y-%m-%d-%H-%M-%S");
        let file = self.dir.join(format!("{}-{ts}.pem", self.prefix));
        let mut data = String::new();
        data.push_str(cert_pem.trim_end());
        data.push('\n');
        data.push_str(key_pem.trim_end());
        data.push('\n');
        write_private(&file, data.as_bytes())?;
        let current = self.current_path();
        if let Ok(m) = std::fs::symlink_metadata(&current) {
            if !m.file_type().is_symlink() {
                return Err(CertError::Io {
                    path: current,
                    reason: "expected a symlink, found a file".into(),
                });
            }
        }
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        let _ = std::fs::remove_file(&updated);
        let target = std::path::absolute(&file).map_err(io_err(&file))?;
        std::os::unix::fs::symlink(&target, &updated).map_err(io_err(&updated))?;
        std::fs::rename(&updated, &current).map_err(io_err(&current))?;
        Ok(file)
    }
}

/// Splits a combined pem into its certificate blocks and its key block.
pub fn split_pem(text: &str) -> Result<Stored, CertError> {
    let mut certs = String::new();
    let mut key = String::new();
    let mut in_block: Option<bool> = None; // Some(true) = certificate
    for line in text.lines() {
        if let Some(label) = line.strip_prefix("-----BEGIN ") {
            in_block = Some(label.starts_with("CERTIFICATE-"));
        }
        match in_block {
            Some(true) => {
                certs.push_str(line);
                certs.push('\n');
            }
            Some(false) => {
                key.push_str(line);
                key.push('\n');
            }
            None => {}
        }
        if line.starts_with("-----END ") {
            in_block = None;
        }
    }
    if key.is_empty() || !key.contains("PRIVATE KEY") {
        return Err(CertError::Parse("no private key in the pem file".into()));
    }
    let chain = parse_certs_pem(certs.as_bytes())?;
    Ok(Stored {
        cert_pem: certs,
        key_pem: key,
        chain,
    })
}

/// Where the CA of a written kubeconfig comes from.
#[derive(Debug, Clone)]
pub enum CaSource {
    /// `certificate-authority: <path>`.
    File(String),
    /// `certificate-authority-data: <base64>` (the bytes given here, PEM).
    Data(Vec<u8>),
    /// `insecure-skip-tls-verify: true` (only when the bootstrap kubeconfig says so).
    Insecure,
}

/// The kubeconfig the Go kubelet writes after bootstrapping: cluster `default-cluster`, user
/// `default-auth` with `client-certificate` and `client-key` both naming the current pem,
/// context `default-context` in namespace `default`.
pub fn node_kubeconfig_yaml(server: &str, ca: &CaSource, pem_path: &Path) -> String {
    use base64::Engine;
    let ca_line = match ca {
        CaSource::File(p) => format!("certificate-authority: {p}"),
        CaSource::Data(d) => format!(
            "certificate-authority-data: {}",
            base64::engine::general_purpose::STANDARD.encode(d)
        ),
        CaSource::Insecure => "insecure-skip-tls-verify: true".into(),
    };
    let pem = pem_path.display();
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    {ca_line}\n    server: {server}\n  name: default-cluster\n\
contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
current-context: default-context\nkind: Config\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    \
client-certificate: {pem}\n    client-key: {pem}\n"
    )
}

/// Writes the node kubeconfig (mode 0600).
pub fn write_node_kubeconfig(
    path: &Path,
    server: &str,
    ca: &CaSource,
    pem_path: &Path,
) -> Result<(), CertError> {
    write_private(path, node_kubeconfig_yaml(server, ca, pem_path).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("deckhand-certstore-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn update_writes_a_timestamped_pem_and_moves_the_current_link() {
        let dir = tmpdir("update");
        let store = FileStore::new(&dir, "kubelet-client");
        assert!(store.current().unwrap().is_none());
        let (c1, k1) = self_signed("one");
        let f1 = store.update(&c1, &k1).unwrap();
        let name = f1.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("kubelet-client-20") && name.ends_with(".pem"),
            "{name}"
        );
        assert_eq!(name.len(), "kubelet-client-2006-01-02-15-04-05.pem".len());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f1).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let cur = store.current().unwrap().unwrap();
        assert_eq!(cur.chain[0].common_name, "one");
        assert!(cur.key_pem.contains("PRIVATE KEY"));
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let (c2, k2) = self_signed("two");
        let f2 = store.update(&c2, &k2).unwrap();
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), f2);
        assert_eq!(
            store.current().unwrap().unwrap().chain[0].common_name,
            "two"
        );
        assert!(
            f1.exists(),
            "old pairs are kept, as the Go kubelet keeps them"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_regular_file_in_place_of_the_link_is_refused() {
        let dir = tmpdir("notlink");
        std::fs::create_dir_all(&dir).unwrap();
        let store = FileStore::new(&dir, "kubelet-client");
        std::fs::write(store.current_path(), "x").unwrap();
        let (c, k) = self_signed("x");
        assert!(store.update(&c, &k).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kubeconfig_points_at_the_current_pem_and_loads_in_kube() {
        let y = node_kubeconfig_yaml(
            "https://10.250.0.1:6443",
            &CaSource::Data(b"PEMDATA".to_vec()),
            Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem"),
        );
        let kc = kube::config::Kubeconfig::from_yaml(&y).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("default-context"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate.as_deref(),
            Some("/var/lib/kubelet/pki/kubelet-client-current.pem")
        );
        assert_eq!(user.client_key, user.client_certificate);
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://10.250.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some("UEVNREFUQQ==")
        );
    }
}
