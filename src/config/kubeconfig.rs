//! Reading kubeconfig files, as client-go's `clientcmd.LoadFromFile` does
//! (k8s.io/client-go/tools/clientcmd/loader.go).
//!
//! kube's `Kubeconfig::read_from` does the same through a YAML deserializer of its own for the
//! kubeconfig types. Going through [`super::file::yaml_value`] instead (the YAML reader the config
//! file and static pod manifests already use) keeps that second decoder out of deckhand's
//! binary: 0.28 MB of code that an idle deckhand keeps mapped (issue 15's memory floor).

use std::path::{Path, PathBuf};

pub use kube::config::Kubeconfig;

/// A kubeconfig that could not be read or decoded.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {path}: {reason}")]
pub struct KubeconfigError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong (never quotes the file: it may hold a token or a key).
    pub reason: String,
}

/// Reads a kubeconfig file: one YAML document decoded as JSON (sigs.k8s.io/yaml, as
/// `clientcmd.Load` does), then its file references made absolute ([`resolve_local_paths`]).
/// An empty file is an empty kubeconfig.
pub fn read(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    let err = |reason: String| KubeconfigError {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut kc = parse(&text).map_err(err)?;
    resolve_local_paths(&mut kc, path.parent().unwrap_or(Path::new("/")));
    Ok(kc)
}

/// Decodes a kubeconfig document (YAML, of which JSON is a subset).
pub fn parse(text: &str) -> Result<Kubeconfig, String> {
    let value = super::file::yaml_value(text)?;
    if value.is_null() {
        return Ok(Kubeconfig::default());
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Makes the kubeconfig's file references absolute against `dir` (the file's directory), as
/// client-go's `ResolveLocalPaths` does: a cluster's certificate-authority, a user's
/// client-certificate, client-key and tokenFile, and an exec plugin's command when it names a
/// path (contains a `/`; a bare name is looked up in `PATH`).
pub fn resolve_local_paths(kc: &mut Kubeconfig, dir: &Path) {
    let absolute = |file: &mut Option<String>| {
        if let Some(f) = file.as_deref().filter(|f| Path::new(f).is_relative()) {
            *file = Some(dir.join(f).to_string_lossy().into_owned());
        }
    };
    for cluster in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        absolute(&mut cluster.certificate_authority);
    }
    for user in kc
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        absolute(&mut user.client_certificate);
        absolute(&mut user.client_key);
        absolute(&mut user.token_file);
        if let Some(exec) = user.exec.as_mut() {
            if exec.command.as_deref().is_some_and(|c| c.contains('/')) {
                absolute(&mut exec.command);
            }
        }
    }
}

/// The kubeconfig a client uses when none is named, in client-go's default loading order
/// (`clientcmd.NewDefaultClientConfigLoadingRules`): the first file of `$KUBECONFIG` that
/// exists, else `$HOME/.kube/config` if it exists; `None` means in-cluster configuration.
///
/// Unlike client-go, the files of a `$KUBECONFIG` list are not merged: the first one is used.
pub fn default_path(kubeconfig_env: Option<&str>, home: Option<&Path>) -> Option<PathBuf> {
    let exists = |p: &PathBuf| p.is_file();
    match kubeconfig_env.filter(|v| !v.is_empty()) {
        Some(list) => list
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .find(exists),
        None => home.map(|h| h.join(".kube/config")).filter(exists),
    }
}

/// A kube client configuration from `path`, or, without one, from [`default_path`] or the
/// in-cluster service account.
pub async fn client_config(path: Option<&Path>) -> Result<kube::Config, KubeconfigError> {
    let env = std::env::var("KUBECONFIG").ok();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let path = match path {
        Some(p) => Some(p.to_path_buf()),
        None => default_path(env.as_deref(), home.as_deref()),
    };
    match path {
        Some(path) => {
            let kc = read(&path)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| KubeconfigError {
                    path,
                    reason: e.to_string(),
                })
        }
        None => kube::Config::incluster().map_err(|e| KubeconfigError {
            path: PathBuf::from("(in-cluster)"),
            reason: format!("no --kubeconfig, no $KUBECONFIG or ~/.kube/config, and {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM_STYLE: &str = r#"apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: pki/ca.crt
    server: https://127.0.0.1:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: system:node:n1
  name: system:node:n1@kubernetes
current-context: system:node:n1@kubernetes
users:
- name: system:node:n1
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: kubelet.key
    tokenFile: token
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/plugin
"#;

    #[test]
    fn relative_file_references_are_made_absolute_against_the_files_directory() {
        let mut kc = parse(KUBEADM_STYLE).unwrap();
        resolve_local_paths(&mut kc, Path::new("/etc/kubernetes"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/etc/kubernetes/pki/ca.crt")
        );
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        let cases = [
            // (field, got, want)
            (
                "client-certificate (absolute: kept)",
                user.client_certificate.as_deref(),
                Some("/var/lib/kubelet/pki/kubelet-client-current.pem"),
            ),
            (
                "client-key",
                user.client_key.as_deref(),
                Some("/etc/kubernetes/kubelet.key"),
            ),
            (
                "tokenFile",
                user.token_file.as_deref(),
                Some("/etc/kubernetes/token"),
            ),
            (
                "exec command naming a path",
                user.exec.as_ref().unwrap().command.as_deref(),
                Some("/etc/kubernetes/./bin/plugin"),
            ),
        ];
        for (field, got, want) in cases {
            assert_eq!(got, want, "{field}");
        }
        assert_eq!(
            kc.current_context.as_deref(),
            Some("system:node:n1@kubernetes")
        );
        assert_eq!(
            kc.contexts[0].context.as_ref().unwrap().user.as_deref(),
            Some("system:node:n1")
        );
    }

    #[test]
    fn an_exec_command_without_a_slash_is_left_to_path_lookup() {
        let mut kc = parse(
            "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n",
        )
        .unwrap();
        resolve_local_paths(&mut kc, Path::new("/etc/kubernetes"));
        let exec = kc.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert_eq!(exec.command.as_deref(), Some("aws"));
    }

    #[test]
    fn decoding() {
        let cases = [
            // (document, Ok(number of clusters) or Err)
            ("", Ok(0)),
            ("# only a comment\n", Ok(0)),
            (
                "{\"clusters\": [{\"name\": \"c\", \"cluster\": {\"server\": \"https://h\"}}]}",
                Ok(1),
            ),
            ("clusters: 7\n", Err(())),
            ("clusters: [\n", Err(())),
        ];
        for (doc, want) in cases {
            let got = parse(doc).map(|kc| kc.clusters.len()).map_err(|_| ());
            assert_eq!(got, want, "{doc:?}");
        }
    }

    #[test]
    fn the_default_kubeconfig_is_the_first_existing_file_of_kubeconfig_else_home() {
        let dir = std::env::temp_dir().join(format!("deckhand-kc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("home/.kube")).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&b, "").unwrap();
        std::fs::write(dir.join("home/.kube/config"), "").unwrap();
        let home = dir.join("home");
        let env = format!("{}:{}", a.display(), b.display());
        let cases = [
            // (KUBECONFIG, HOME, want)
            (Some(env.as_str()), Some(home.as_path()), Some(b.clone())),
            (Some(a.to_str().unwrap()), Some(home.as_path()), None),
            (None, Some(home.as_path()), Some(home.join(".kube/config"))),
            (
                Some(""),
                Some(home.as_path()),
                Some(home.join(".kube/config")),
            ),
            (None, Some(dir.as_path()), None),
            (None, None, None),
        ];
        for (env, home, want) in cases {
            assert_eq!(
                default_path(env, home),
                want,
                "KUBECONFIG={env:?} HOME={home:?}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
