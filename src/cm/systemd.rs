//! The systemd cgroup driver's slices through systemd's D-Bus API, as the Go kubelet makes them
//! through libcontainer (github.com/opencontainers/cgroups `systemd`, `UnifiedManager` and
//! `LegacyManager`): each pod, QoS class and `kubepods` cgroup is a transient slice unit that
//! systemd starts, whose resource limits are unit properties (`CPUWeight`, `MemoryMax`,
//! `TasksMax`, ...) and which systemd stops when the pod goes.
//!
//! Why not only write the cgroup files (which deckhand also does, as libcontainer's `Set` does
//! after `SetUnitProperties`): systemd owns every cgroup under its tree. A slice it did not start
//! is one it learns of later (when runc starts a container's scope in it) as a unit without
//! limits, and a `systemctl daemon-reload` (which `kubeadm join` runs) then writes its own idea
//! of the limits, `max`, over the files. A slice started with its properties keeps them.
//!
//! What is decided here is pure and table-tested: the unit and parent names of a cgroup
//! ([`slice_unit`]) and the properties of a [`ResourceConfig`] ([`slice_properties`]);
//! [`SystemdSlices`] only carries them to systemd.

use super::{CgroupName, ResourceConfig, QUOTA_PERIOD_US};
use std::time::Duration;
use zbus::zvariant::{OwnedObjectPath, Value};

/// How long a slice's start or stop job may take (libcontainer's 30 s).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);

const DESTINATION: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// The D-Bus error systemd answers StartTransientUnit with when the unit exists.
const UNIT_EXISTS: &str = "org.freedesktop.systemd1.UnitExists";
/// The D-Bus error of StopUnit for a unit systemd does not know.
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// A D-Bus call to systemd that failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The system bus could not be reached or the call failed.
    #[error("systemd D-Bus {call} {unit}: {source}")]
    Call {
        /// The method (`StartTransientUnit`, `SetUnitProperties`, `StopUnit`).
        call: &'static str,
        /// The unit.
        unit: String,
        /// What zbus said.
        #[source]
        source: zbus::Error,
    },
    /// The job did not finish within [`JOB_TIMEOUT`], or finished with another result than
    /// `done`.
    #[error("systemd job for {unit}: {result}")]
    Job {
        /// The unit.
        unit: String,
        /// `timeout`, or systemd's job result (`failed`, `canceled`, ...).
        result: String,
    },
}

/// A unit property, as libcontainer passes it (`systemdDbus.Property`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    /// A boolean (`DefaultDependencies`, `MemoryAccounting`, ...).
    Bool(&'static str, bool),
    /// An unsigned 64-bit number (`CPUWeight`, `MemoryMax`; `u64::MAX` is systemd's
    /// `infinity`).
    U64(&'static str, u64),
    /// A string (`Description`).
    Str(&'static str, String),
    /// A list of unit names (`Wants`).
    Units(&'static str, Vec<String>),
}

impl Property {
    fn name(&self) -> &'static str {
        match self {
            Property::Bool(n, _) | Property::U64(n, _) | Property::Str(n, _) => n,
            Property::Units(n, _) => n,
        }
    }

    fn value(&self) -> Value<'_> {
        match self {
            Property::Bool(_, b) => Value::from(*b),
            Property::U64(_, v) => Value::from(*v),
            Property::Str(_, s) => Value::from(s.as_str()),
            Property::Units(_, v) => Value::from(v.iter().map(String::as_str).collect::<Vec<_>>()),
        }
    }
}

/// The slice unit of a cgroup and its parent slice (k/k `libctCgroupConfig` for the systemd
/// driver: `path.Split(name.ToSystemd())`, the parent `-.slice` at the top):
/// `kubepods/burstable/pod1-2` is `kubepods-burstable-pod1_2.slice` in
/// `kubepods-burstable.slice`; `kubepods` is `kubepods.slice` in `-.slice`.
pub fn slice_unit(name: &CgroupName) -> (String, String) {
    let path = name.to_systemd();
    let (dir, base) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
    let parent = match dir.rsplit('/').next() {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => "-.slice".to_string(),
    };
    (base.to_string(), parent)
}

/// Converts cpu.shares to cgroup v2's cpu.weight as the Go kubelet's cgroup manager does
/// (k/k `pkg/kubelet/cm` `getCPUWeight`): `[2, 262144]` onto `[1, 10000]`, linearly.
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares >= 262_144 {
        return 10_000;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// systemd's `CPUQuotaPerSecUSec` for a CFS quota of `quota` µs per `period` µs, and the quota
/// to write to the cgroup files with it (libcontainer `addCPUQuota`): systemd keeps whole
/// percents of a CPU, so a fraction is rounded up to the next 10 ms per second and the quota
/// raised to match; a negative quota is `infinity` (`u64::MAX`). `None` for no quota.
pub fn cpu_quota_per_sec(quota: Option<i64>, period: Option<u64>) -> Option<(u64, Option<i64>)> {
    let q = quota?;
    if q <= 0 {
        return Some((u64::MAX, quota));
    }
    let period = period.filter(|p| *p > 0).unwrap_or(QUOTA_PERIOD_US);
    let per_sec = q as u64 * 1_000_000 / period;
    if per_sec % 10_000 == 0 {
        return Some((per_sec, quota));
    }
    let rounded = (per_sec / 10_000 + 1) * 10_000;
    Some((rounded, Some((rounded * period / 1_000_000) as i64)))
}

/// The properties of a new slice: what libcontainer's `Apply(-1)` passes for a slice
/// (`Description`, `Wants=<parent>`, every accounting on, `DefaultDependencies=false`), then
/// [`slice_properties`].
pub fn new_slice_properties(
    unit: &str,
    parent: &str,
    rc: &ResourceConfig,
    v2: bool,
) -> Vec<Property> {
    let mut p = vec![
        Property::Str("Description", format!("libcontainer container {unit}")),
        Property::Units("Wants", vec![parent.to_string()]),
        Property::Bool("MemoryAccounting", true),
        Property::Bool("CPUAccounting", true),
        Property::Bool("IOAccounting", true),
        Property::Bool("TasksAccounting", true),
        Property::Bool("DefaultDependencies", false),
    ];
    p.extend(slice_properties(rc, v2));
    p
}

/// The resource properties of `rc` (libcontainer `genV2ResourcesProperties`, and
/// `genV1ResourcesProperties` on cgroup v1): `MemoryMax` (v1 `MemoryLimit`; a negative limit is
/// `infinity`), `CPUWeight` from the shares ([`cpu_shares_to_weight`]; v1 `CPUShares`),
/// `CPUQuotaPeriodUSec` and `CPUQuotaPerSecUSec` ([`cpu_quota_per_sec`]), `TasksMax` (negative:
/// `infinity`, 0: 1, as systemd refuses 0). Devices are left alone (the kubelet's
/// `SkipDevices`).
pub fn slice_properties(rc: &ResourceConfig, v2: bool) -> Vec<Property> {
    let mut p = Vec::new();
    if let Some(m) = rc.memory_limit.filter(|m| *m != 0) {
        let v = if m < 0 { u64::MAX } else { m as u64 };
        p.push(Property::U64(
            if v2 { "MemoryMax" } else { "MemoryLimit" },
            v,
        ));
    }
    if let Some(s) = rc.cpu_shares.filter(|s| *s != 0) {
        p.push(if v2 {
            Property::U64("CPUWeight", cpu_shares_to_weight(s))
        } else {
            Property::U64("CPUShares", s)
        });
    }
    if let Some(period) = rc.cpu_period.filter(|p| *p != 0) {
        p.push(Property::U64("CPUQuotaPeriodUSec", period));
    }
    if let Some((per_sec, _)) = cpu_quota_per_sec(rc.cpu_quota, rc.cpu_period) {
        p.push(Property::U64("CPUQuotaPerSecUSec", per_sec));
    }
    if let Some(n) = rc.pids_limit {
        let v = match n {
            n if n < 0 => u64::MAX,
            0 => 1,
            n => n as u64,
        };
        p.push(Property::U64("TasksMax", v));
    }
    p
}

/// `rc` as it is written to the cgroup files next to the unit properties: the CFS quota raised
/// as [`cpu_quota_per_sec`] raised it, so that files and unit agree (libcontainer `Set` writes
/// the same adjusted value).
pub fn files_config(rc: &ResourceConfig) -> ResourceConfig {
    match cpu_quota_per_sec(rc.cpu_quota, rc.cpu_period) {
        Some((_, quota)) => ResourceConfig {
            cpu_quota: quota,
            ..rc.clone()
        },
        None => rc.clone(),
    }
}

/// True when systemd is the init system (`sd_booted`: `/run/systemd/system` exists).
pub fn systemd_booted() -> bool {
    std::path::Path::new("/run/systemd/system").is_dir()
}

/// A connection to systemd on the system bus, for slices. Its calls block (they run on the
/// cgroup manager's blocking tasks, like every cgroup write) on the tokio runtime it was made
/// on.
#[derive(Debug)]
pub struct SystemdSlices {
    conn: zbus::Connection,
    runtime: tokio::runtime::Handle,
}

fn method_error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        zbus::Error::FDO(fdo) => match fdo.as_ref() {
            zbus::fdo::Error::ZBus(inner) => method_error_name(inner),
            _ => None,
        },
        _ => None,
    }
}

impl SystemdSlices {
    /// Connects to systemd on the system bus and subscribes to its job signals. `None` when
    /// systemd is not the init system ([`systemd_booted`]): then the cgroup files are written
    /// alone.
    ///
    /// Errors: [`SystemdError::Call`] when systemd runs but its bus does not answer.
    pub async fn connect() -> Result<Option<Self>, SystemdError> {
        if !systemd_booted() {
            return Ok(None);
        }
        let call_err = |call: &'static str| {
            move |source| SystemdError::Call {
                call,
                unit: String::new(),
                source,
            }
        };
        let conn = zbus::Connection::system()
            .await
            .map_err(call_err("connect"))?;
        conn.call_method(Some(DESTINATION), PATH, Some(MANAGER), "Subscribe", &())
            .await
            .map_err(call_err("Subscribe"))?;
        Ok(Some(SystemdSlices {
            conn,
            runtime: tokio::runtime::Handle::current(),
        }))
    }

    async fn proxy(&self) -> Result<zbus::Proxy<'static>, zbus::Error> {
        zbus::Proxy::new(&self.conn, DESTINATION, PATH, MANAGER).await
    }

    /// Runs `start` (a call returning a job) and waits for that job's `JobRemoved` signal.
    async fn job<F>(&self, call: &'static str, unit: &str, start: F) -> Result<(), SystemdError>
    where
        F: std::future::Future<Output = Result<OwnedObjectPath, zbus::Error>>,
    {
        use futures::StreamExt;
        let err = |source| SystemdError::Call {
            call,
            unit: unit.to_string(),
            source,
        };
        let proxy = self.proxy().await.map_err(err)?;
        // subscribe before the call, so the signal of a fast job is not missed
        let mut removed = proxy.receive_signal("JobRemoved").await.map_err(err)?;
        let job = start.await.map_err(err)?;
        let wait = async {
            while let Some(msg) = removed.next().await {
                let Ok((_id, path, _unit, result)) =
                    msg.body()
                        .deserialize::<(u32, OwnedObjectPath, String, String)>()
                else {
                    continue;
                };
                if path == job {
                    return result;
                }
            }
            "the signal stream ended".to_string()
        };
        match tokio::time::timeout(JOB_TIMEOUT, wait).await {
            Ok(r) if r == "done" => Ok(()),
            Ok(result) => Err(SystemdError::Job {
                unit: unit.to_string(),
                result,
            }),
            Err(_) => Err(SystemdError::Job {
                unit: unit.to_string(),
                result: "timeout".into(),
            }),
        }
    }

    /// Makes sure slice `unit` exists with `props` (libcontainer `Apply(-1)` then `Set`): a
    /// transient unit started with [`new_slice_properties`], or, when it exists already (a
    /// restart of deckhand), its resource properties set.
    ///
    /// Errors: [`SystemdError`].
    pub fn ensure(
        &self,
        unit: &str,
        parent: &str,
        rc: &ResourceConfig,
        v2: bool,
    ) -> Result<(), SystemdError> {
        self.runtime.block_on(async {
            let props = new_slice_properties(unit, parent, rc, v2);
            let args: Vec<(&str, Value)> = props.iter().map(|p| (p.name(), p.value())).collect();
            let aux: Vec<(&str, Vec<(&str, Value)>)> = Vec::new();
            let started = self
                .job("StartTransientUnit", unit, async {
                    let proxy = self.proxy().await?;
                    proxy
                        .call::<_, _, OwnedObjectPath>(
                            "StartTransientUnit",
                            &(unit, "replace", args, aux),
                        )
                        .await
                })
                .await;
            match started {
                Err(SystemdError::Call { ref source, .. })
                    if method_error_name(source) == Some(UNIT_EXISTS) =>
                {
                    self.set_async(unit, rc, v2).await
                }
                other => other,
            }
        })
    }

    async fn set_async(
        &self,
        unit: &str,
        rc: &ResourceConfig,
        v2: bool,
    ) -> Result<(), SystemdError> {
        let props = slice_properties(rc, v2);
        if props.is_empty() {
            return Ok(());
        }
        let args: Vec<(&str, Value)> = props.iter().map(|p| (p.name(), p.value())).collect();
        let err = |source| SystemdError::Call {
            call: "SetUnitProperties",
            unit: unit.to_string(),
            source,
        };
        let proxy = self.proxy().await.map_err(err)?;
        proxy
            .call::<_, _, ()>("SetUnitProperties", &(unit, true, args))
            .await
            .map_err(err)
    }

    /// Sets the resource properties of slice `unit` (libcontainer `Set`: `SetUnitProperties`,
    /// runtime only).
    ///
    /// Errors: [`SystemdError::Call`].
    pub fn set(&self, unit: &str, rc: &ResourceConfig, v2: bool) -> Result<(), SystemdError> {
        self.runtime.block_on(self.set_async(unit, rc, v2))
    }

    /// Stops slice `unit` (libcontainer `Destroy`: `StopUnit`, then `ResetFailedUnit`); systemd
    /// removes its cgroup. A unit systemd does not know is not an error.
    ///
    /// Errors: [`SystemdError`].
    pub fn stop(&self, unit: &str) -> Result<(), SystemdError> {
        self.runtime.block_on(async {
            let stopped = self
                .job("StopUnit", unit, async {
                    let proxy = self.proxy().await?;
                    proxy
                        .call::<_, _, OwnedObjectPath>("StopUnit", &(unit, "replace"))
                        .await
                })
                .await;
            if let Ok(proxy) = self.proxy().await {
                // a failed unit stays until reset; nothing to report if there is none
                let _ = proxy.call::<_, _, ()>("ResetFailedUnit", &(unit,)).await;
            }
            match stopped {
                Err(SystemdError::Call { ref source, .. })
                    if method_error_name(source) == Some(NO_SUCH_UNIT) =>
                {
                    Ok(())
                }
                other => other,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(
        shares: Option<u64>,
        quota: Option<i64>,
        period: Option<u64>,
        mem: Option<i64>,
        pids: Option<i64>,
    ) -> ResourceConfig {
        ResourceConfig {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            memory_limit: mem,
            pids_limit: pids,
        }
    }

    #[test]
    fn slice_units_and_their_parents_follow_the_go_kubelet() {
        let n = |parts: &[&str]| CgroupName::new(parts.iter().copied()).unwrap();
        let cases = [
            (n(&["kubepods"]), "kubepods.slice", "-.slice"),
            (
                n(&["kubepods", "burstable"]),
                "kubepods-burstable.slice",
                "kubepods.slice",
            ),
            (
                n(&["kubepods", "burstable", "pod12-34"]),
                "kubepods-burstable-pod12_34.slice",
                "kubepods-burstable.slice",
            ),
            (
                n(&["kubepods", "pod9"]),
                "kubepods-pod9.slice",
                "kubepods.slice",
            ),
            // kind's cgroupRoot: /kubelet
            (
                n(&["kubelet", "kubepods"]),
                "kubelet-kubepods.slice",
                "kubelet.slice",
            ),
        ];
        for (name, unit, parent) in cases {
            assert_eq!(
                slice_unit(&name),
                (unit.to_string(), parent.to_string()),
                "{name:?}"
            );
        }
    }

    #[test]
    fn cpu_weight_is_the_go_kubelets_linear_conversion() {
        for (shares, weight) in [
            (2, 1),
            (3, 1),
            (1024, 39),
            (2048, 79),
            (262_143, 9_999),
            (262_144, 10_000),
            (1_000_000, 10_000),
        ] {
            assert_eq!(cpu_shares_to_weight(shares), weight, "{shares}");
        }
    }

    #[test]
    fn cpu_quota_rounds_up_to_whole_percents_as_libcontainer() {
        let cases = [
            ("no quota", None, None, None),
            (
                "unlimited",
                Some(-1),
                Some(100_000),
                Some((u64::MAX, Some(-1))),
            ),
            (
                "500m",
                Some(50_000),
                Some(100_000),
                Some((500_000, Some(50_000))),
            ),
            // 1 ms per 100 ms is 1 % exactly
            (
                "10m",
                Some(1_000),
                Some(100_000),
                Some((10_000, Some(1_000))),
            ),
            // 1.5 ms per 100 ms is 15 ms per second: up to 20 ms, quota 2000
            (
                "15m",
                Some(1_500),
                Some(100_000),
                Some((20_000, Some(2_000))),
            ),
            (
                "default period",
                Some(25_000),
                None,
                Some((250_000, Some(25_000))),
            ),
        ];
        for (case, quota, period, want) in cases {
            assert_eq!(cpu_quota_per_sec(quota, period), want, "{case}");
        }
        let r = files_config(&rc(Some(2), Some(1_500), Some(100_000), None, None));
        assert_eq!(r.cpu_quota, Some(2_000));
    }

    #[test]
    fn resource_properties_per_cgroup_version() {
        use Property::U64;
        let cases: Vec<(&str, ResourceConfig, bool, Vec<Property>)> = vec![
            (
                "besteffort qos: weight only",
                rc(Some(2), None, None, None, None),
                true,
                vec![U64("CPUWeight", 1)],
            ),
            (
                "guaranteed pod, v2",
                rc(
                    Some(512),
                    Some(50_000),
                    Some(100_000),
                    Some(64 << 20),
                    Some(1024),
                ),
                true,
                vec![
                    U64("MemoryMax", 64 << 20),
                    U64("CPUWeight", 20),
                    U64("CPUQuotaPeriodUSec", 100_000),
                    U64("CPUQuotaPerSecUSec", 500_000),
                    U64("TasksMax", 1024),
                ],
            ),
            (
                "resize to unlimited",
                rc(Some(2), Some(-1), Some(100_000), Some(-1), Some(-1)),
                true,
                vec![
                    U64("MemoryMax", u64::MAX),
                    U64("CPUWeight", 1),
                    U64("CPUQuotaPeriodUSec", 100_000),
                    U64("CPUQuotaPerSecUSec", u64::MAX),
                    U64("TasksMax", u64::MAX),
                ],
            ),
            (
                "v1 names",
                rc(Some(512), None, None, Some(1 << 30), Some(0)),
                false,
                vec![
                    U64("MemoryLimit", 1 << 30),
                    U64("CPUShares", 512),
                    U64("TasksMax", 1),
                ],
            ),
        ];
        for (case, r, v2, want) in cases {
            assert_eq!(slice_properties(&r, v2), want, "{case}");
        }
        let new = new_slice_properties(
            "kubepods.slice",
            "-.slice",
            &ResourceConfig::default(),
            true,
        );
        assert_eq!(new[1], Property::Units("Wants", vec!["-.slice".into()]));
        assert!(new.contains(&Property::Bool("DefaultDependencies", false)));
        assert!(new.contains(&Property::Bool("TasksAccounting", true)));
    }
}
