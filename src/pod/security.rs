//! A container's security settings as the runtime gets them: the `runAsNonRoot` check against
//! the image's user (k/k `pkg/kubelet/kuberuntime/security_context_others.go`), and the seccomp
//! and AppArmor profiles, container over pod (`kuberuntime/helpers.go`,
//! `helpers_linux.go`). Moved out of [`super::spec`], which builds the rest of the CRI configs
//! and re-exports these.

use super::spec::SpecError;
use crate::cri::api;
use k8s_openapi::api::core::v1::{Container, Pod};

/// The user an image runs as, from CRI ImageStatus (k/k `kuberuntime/helpers.go` getImageUser).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ImageUser {
    /// No user in the image config: root.
    #[default]
    Root,
    /// A numeric uid.
    Uid(i64),
    /// A non-numeric user name.
    Name(String),
}

impl ImageUser {
    /// The user of `image` as CRI ImageStatus describes it: its numeric uid when it has one,
    /// else its user name, else root (k/k `getImageUser`). An image that cannot be inspected
    /// is taken as root, as in Go: that is [`ImageUser::default`].
    pub fn of(image: &api::Image) -> Self {
        match (&image.uid, image.username.as_str()) {
            (Some(u), _) => ImageUser::Uid(u.value),
            (None, "") => ImageUser::Root,
            (None, n) => ImageUser::Name(n.to_string()),
        }
    }
}

/// Refuses a container whose effective `runAsNonRoot` cannot hold (k/k
/// `kuberuntime/security_context_others.go` verifyRunAsNonRoot), with the Go kubelet's messages.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_user: &ImageUser,
) -> Result<(), SpecError> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if !non_root {
        return Ok(());
    }
    let p = super::format_pod(pod);
    let n = &c.name;
    if let Some(uid) = csc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user))
    {
        if uid == 0 {
            return Err(SpecError::Security(format!(
                "container's runAsUser breaks non-root policy (pod: {p:?}, container: {n})"
            )));
        }
        return Ok(());
    }
    match image_user {
        ImageUser::Name(u) => Err(SpecError::Security(format!(
            "container has runAsNonRoot and image has non-numeric user ({u}), cannot verify user is non-root (pod: {p:?}, container: {n})"
        ))),
        ImageUser::Root | ImageUser::Uid(0) => Err(SpecError::Security(format!(
            "container has runAsNonRoot and image will run as root (pod: {p:?}, container: {n})"
        ))),
        ImageUser::Uid(u) if *u < 0 || *u > i32::MAX as i64 => Err(SpecError::Security(format!(
            "container has runAsNonRoot and image has an invalid user id ({u}). (Must be 1-({})): must be between 0 and 2147483647, inclusive (pod: {p:?}, container: {n})",
            i32::MAX
        ))),
        ImageUser::Uid(_) => Ok(()),
    }
}

/// Converts a seccomp profile (container's, else pod's) to CRI (k/k `kuberuntime/helpers.go`
/// getSeccompProfile with `seccompDefault: false`): none or `Unconfined` → unconfined,
/// `RuntimeDefault` → runtime default, `Localhost` → the file under `<root-dir>/seccomp`.
pub fn seccomp_profile(
    pod_sc: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    container_sc: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    seccomp_root: &str,
) -> api::SecurityProfile {
    use api::security_profile::ProfileType;
    match container_sc.or(pod_sc) {
        Some(p) if p.type_ == "RuntimeDefault" => api::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some(p) if p.type_ == "Localhost" => api::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: format!(
                "{}/{}",
                seccomp_root.trim_end_matches('/'),
                p.localhost_profile.clone().unwrap_or_default()
            ),
        },
        _ => api::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    }
}

/// Converts an AppArmor profile (container's, else pod's) to CRI; None when neither sets one
/// (the runtime's default applies).
pub fn apparmor_profile(
    pod_p: Option<&k8s_openapi::api::core::v1::AppArmorProfile>,
    container_p: Option<&k8s_openapi::api::core::v1::AppArmorProfile>,
) -> Option<api::SecurityProfile> {
    use api::security_profile::ProfileType;
    container_p.or(pod_p).map(|p| match p.type_.as_str() {
        "RuntimeDefault" => api::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        "Localhost" => api::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: p.localhost_profile.clone().unwrap_or_default(),
        },
        _ => api::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::spec::tests::pod_with;
    use crate::pod::spec::{container_config, ContainerRuntimeInputs};

    #[test]
    fn the_image_user_is_its_uid_else_its_name_else_root() {
        let image = |uid: Option<i64>, name: &str| api::Image {
            uid: uid.map(|value| api::Int64Value { value }),
            username: name.into(),
            ..Default::default()
        };
        // (image, its user)
        let cases = [
            (Some(image(Some(1000), "")), ImageUser::Uid(1000)),
            (Some(image(Some(0), "root")), ImageUser::Uid(0)),
            (
                Some(image(None, "nobody")),
                ImageUser::Name("nobody".into()),
            ),
            (Some(image(None, "")), ImageUser::Root),
            (None, ImageUser::Root),
        ];
        for (img, want) in cases {
            let got = img.as_ref().map(ImageUser::of).unwrap_or_default();
            assert_eq!(got, want, "{img:?}");
        }
    }

    #[test]
    fn run_as_non_root_is_verified_against_the_image_user() {
        use k8s_openapi::api::core::v1::SecurityContext;
        let mut c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            security_context: Some(SecurityContext {
                run_as_non_root: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut p = pod_with(c.clone());
        p.metadata.uid = Some("u1".into());
        let e = verify_run_as_non_root(&p, &c, &ImageUser::Root).unwrap_err();
        assert_eq!(
            e.to_string(),
            "container has runAsNonRoot and image will run as root (pod: \"web_default(u1)\", container: app)"
        );
        assert!(verify_run_as_non_root(&p, &c, &ImageUser::Uid(1000)).is_ok());
        let e = verify_run_as_non_root(&p, &c, &ImageUser::Name("nobody".into())).unwrap_err();
        assert!(e
            .to_string()
            .contains("image has non-numeric user (nobody)"));
        c.security_context.as_mut().unwrap().run_as_user = Some(0);
        let e = verify_run_as_non_root(&p, &c, &ImageUser::Uid(1000)).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("container's runAsUser breaks non-root policy"));
        c.security_context.as_mut().unwrap().run_as_user = Some(1000);
        assert!(verify_run_as_non_root(&p, &c, &ImageUser::Root).is_ok());
        // the pod-level setting applies when the container says nothing
        let c2 = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let mut p2 = pod_with(c2.clone());
        p2.spec.as_mut().unwrap().security_context =
            Some(k8s_openapi::api::core::v1::PodSecurityContext {
                run_as_non_root: Some(true),
                fs_group: Some(2000),
                supplemental_groups: Some(vec![3000]),
                ..Default::default()
            });
        assert!(verify_run_as_non_root(&p2, &c2, &ImageUser::Uid(0)).is_err());
        let inp = ContainerRuntimeInputs {
            image_user: ImageUser::Uid(1234),
            ..Default::default()
        };
        p2.spec
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .run_as_non_root = None;
        let cfg = container_config(&p2, "app", &inp).unwrap();
        let sc = cfg.linux.unwrap().security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(api::Int64Value { value: 1234 }));
        assert_eq!(sc.supplemental_groups, vec![2000, 3000]);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::Unconfined as i32
        );
    }

    #[test]
    fn seccomp_profiles_convert_container_over_pod() {
        use k8s_openapi::api::core::v1::SeccompProfile;
        let rd = SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        };
        let lh = SeccompProfile {
            type_: "Localhost".into(),
            localhost_profile: Some("profiles/audit.json".into()),
        };
        let p = seccomp_profile(Some(&rd), Some(&lh), "/var/lib/kubelet/seccomp");
        assert_eq!(
            p.localhost_ref,
            "/var/lib/kubelet/seccomp/profiles/audit.json"
        );
        let p = seccomp_profile(Some(&rd), None, "/x");
        assert_eq!(
            p.profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
    }
}
