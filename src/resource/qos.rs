//! A pod's Quality of Service class (k/k `pkg/apis/core/v1/helper/qos`) and the OOM score
//! adjustment it gives a container (k/k `pkg/kubelet/qos/policy.go`).

use super::{container_limits, container_request, container_requests, CPU, MEMORY};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// oom_score_adj of Guaranteed and node-critical containers (k/k `qos.guaranteedOOMScoreAdj`).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// oom_score_adj of BestEffort containers (k/k `qos.besteffortOOMScoreAdj`).
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// A pod's QoS class (`v1.PodQOSClass`); [`QosClass::as_str`] is the API string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container's cpu and memory limits equal its requests.
    Guaranteed,
    /// Neither Guaranteed nor BestEffort.
    Burstable,
    /// No container requests or limits any cpu or memory.
    BestEffort,
}

impl QosClass {
    /// The API string (`status.qosClass`): `Guaranteed`, `Burstable`, `BestEffort`.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// QoS class of a pod (k/k `qos.ComputePodQOS` over the containers): `Guaranteed` when every
/// container (init and regular) has cpu and memory limits equal to its requests (a missing
/// request counts as equal), `BestEffort` when no container has a non-zero cpu or memory
/// request or limit, else `Burstable`. Pod-level `spec.resources` are not considered (the Go
/// function uses them when set), nor is `status.qosClass`. An unparsable quantity counts as 0.
pub fn qos_class(pod: &Pod) -> QosClass {
    let Some(spec) = pod.spec.as_ref() else {
        return QosClass::BestEffort;
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        for r in [CPU, MEMORY] {
            let milli = |m: Option<&std::collections::BTreeMap<String, Quantity>>| {
                m.and_then(|m| m.get(r))
                    .map(|q| super::quantity_milli(q).unwrap_or(0))
            };
            let rq = milli(container_requests(c));
            let lm = milli(container_limits(c));
            if rq.is_some_and(|v| v != 0) || lm.is_some_and(|v| v != 0) {
                any = true;
            }
            match (rq, lm) {
                (_, None) => guaranteed = false,
                (Some(a), Some(b)) if a != b => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The OOM score adjustment of container `c` of `pod` on a node with `memory_capacity_bytes` of
/// memory (k/k `qos.GetContainerOOMScoreAdjust`): -997 for Guaranteed and node-critical pods
/// (`system-node-critical` at priority ≥ 2·10⁹), 1000 for BestEffort, else
/// `1000 − 1000·memoryRequest/memoryCapacity` (request in whole bytes, rounded down) clamped to
/// [3, 999]; a sidecar gets no higher than the pod's smallest regular container would.
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity_bytes: i64) -> i64 {
    let spec = pod.spec.clone().unwrap_or_default();
    let node_critical = spec.priority_class_name.as_deref() == Some("system-node-critical")
        && spec.priority.unwrap_or(0) >= 2_000_000_000;
    let qos = qos_class(pod);
    if node_critical || qos == QosClass::Guaranteed {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    if qos == QosClass::BestEffort {
        return BEST_EFFORT_OOM_SCORE_ADJ;
    }
    let cap = memory_capacity_bytes.max(1) as i128;
    let mem_req = |c: &Container| container_request(c, MEMORY).unwrap_or(0) / 1000;
    let mut adj = 1000 - (1000 * mem_req(c)) / cap;
    let is_sidecar = crate::pod::is_sidecar(c)
        && spec
            .init_containers
            .iter()
            .flatten()
            .any(|i| i.name == c.name);
    if is_sidecar {
        let min_regular = spec.containers.iter().map(mem_req).min().unwrap_or(0);
        adj = adj.min(1000 - (1000 * min_regular) / cap);
    }
    if adj < 3 {
        3
    } else if adj == 1000 {
        999
    } else {
        adj as i64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use std::collections::BTreeMap;

    /// A container with these requests and limits (test helper, also used by cm's tests).
    pub(crate) fn ctr(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(req),
                limits: m(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod with these containers (test helper, also used by cm's tests).
    pub(crate) fn pod(cs: Vec<Container>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: cs,
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn qos_classes_follow_compute_pod_qos() {
        let full = [("cpu", "1"), ("memory", "1Gi")];
        let mut with_init = pod(vec![ctr("a", &full, &full)]);
        with_init.spec.as_mut().unwrap().init_containers =
            Some(vec![ctr("i", &[("cpu", "1")], &[])]);
        let cases: Vec<(&str, Pod, QosClass)> = vec![
            ("no spec", Pod::default(), QosClass::BestEffort),
            (
                "no resources",
                pod(vec![Container::default()]),
                QosClass::BestEffort,
            ),
            (
                "zero requests",
                pod(vec![ctr("a", &[("cpu", "0")], &[])]),
                QosClass::BestEffort,
            ),
            (
                "only other resources",
                pod(vec![ctr("a", &[("ephemeral-storage", "1Gi")], &[])]),
                QosClass::BestEffort,
            ),
            (
                "limits equal requests",
                pod(vec![ctr("a", &full, &full)]),
                QosClass::Guaranteed,
            ),
            (
                "limits without requests",
                pod(vec![ctr("a", &[], &full)]),
                QosClass::Guaranteed,
            ),
            (
                "requests below limits",
                pod(vec![ctr("a", &[("cpu", "500m"), ("memory", "1Gi")], &full)]),
                QosClass::Burstable,
            ),
            (
                "a memory limit missing",
                pod(vec![ctr("a", &[], &[("cpu", "1")])]),
                QosClass::Burstable,
            ),
            (
                "an init container without limits",
                with_init,
                QosClass::Burstable,
            ),
            (
                "cpu request below the cpu limit, memory limit only",
                pod(vec![ctr(
                    "c",
                    &[("cpu", "250m")],
                    &[("cpu", "500m"), ("memory", "64Mi")],
                )]),
                QosClass::Burstable,
            ),
        ];
        for (what, p, want) in cases {
            assert_eq!(qos_class(&p), want, "{what}");
        }
        let names: Vec<String> = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .iter()
        .map(|q| q.to_string())
        .collect();
        assert_eq!(names, ["Guaranteed", "Burstable", "BestEffort"]);
    }

    #[test]
    fn oom_score_adj_per_qos_class() {
        let cap = 4 * 1024 * 1024 * 1024i64;
        let g = pod(vec![ctr(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        )]);
        assert_eq!(
            oom_score_adj(&g, &g.spec.as_ref().unwrap().containers[0], cap),
            -997
        );
        let be = pod(vec![ctr("a", &[], &[])]);
        assert_eq!(
            oom_score_adj(&be, &be.spec.as_ref().unwrap().containers[0], cap),
            1000
        );
        let b = pod(vec![ctr("a", &[("memory", "1Gi")], &[])]);
        assert_eq!(
            oom_score_adj(&b, &b.spec.as_ref().unwrap().containers[0], cap),
            750
        );
        let tiny = pod(vec![ctr("a", &[("cpu", "10m")], &[])]);
        assert_eq!(
            oom_score_adj(&tiny, &tiny.spec.as_ref().unwrap().containers[0], cap),
            999
        );
        let huge = pod(vec![ctr("a", &[("memory", "8Gi")], &[])]);
        assert_eq!(
            oom_score_adj(&huge, &huge.spec.as_ref().unwrap().containers[0], cap),
            3
        );
    }

    #[test]
    fn sidecars_and_node_critical_pods_get_the_go_kubelets_scores() {
        let cap = 4 * 1024 * 1024 * 1024i64;
        // a sidecar requesting little scores no higher than the smallest regular container
        let mut s = ctr("s", &[("memory", "10Mi")], &[]);
        s.restart_policy = Some("Always".into());
        let mut p = pod(vec![ctr("a", &[("memory", "2Gi")], &[])]);
        p.spec.as_mut().unwrap().init_containers = Some(vec![s.clone()]);
        assert_eq!(oom_score_adj(&p, &s, cap), 500);
        // a plain init container keeps its own score
        let mut i = s.clone();
        i.restart_policy = None;
        p.spec.as_mut().unwrap().init_containers = Some(vec![i.clone()]);
        assert_eq!(oom_score_adj(&p, &i, cap), 998);
        let spec = p.spec.as_mut().unwrap();
        spec.priority_class_name = Some("system-node-critical".into());
        spec.priority = Some(2_000_001_000);
        assert_eq!(oom_score_adj(&p, &i, cap), GUARANTEED_OOM_SCORE_ADJ);
    }
}
