//! `deckhand-scheduler`: schedules the pods whose `spec.schedulerName` is its name (default
//! `default-scheduler`, so it stands in for kube-scheduler), with kube-scheduler's filters, scores,
//! queue and messages. Takes kube-scheduler's flag names where they exist; elects a leader on a
//! Lease (`--leader-elect`, default on) and stops cleanly on SIGTERM or SIGINT, releasing the Lease.

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Parser};
use deckhand::scheduler::leader::{ElectionConfig, Elector, HoldEnd};
use deckhand::scheduler::runner::{self, Config};
use deckhand::scheduler::DEFAULT_SCHEDULER_NAME;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Go-style durations (`15s`, `500ms`, `1m30s`, `2h`), as the kubelet's flags parse them.
use deckhand::config::parse_go_duration as parse_duration;

/// Flags (kube-scheduler's names).
#[derive(Debug, Parser)]
#[command(
    name = "deckhand-scheduler",
    version,
    about = "A small Kubernetes scheduler with kube-scheduler's semantics"
)]
struct Flags {
    /// Path to a kubeconfig. Without it, the first existing file of `$KUBECONFIG`, else
    /// `~/.kube/config`, else the in-cluster service account (`config::kubeconfig::client_config`).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Schedule the pods whose spec.schedulerName is this.
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Elect a leader on a Lease before scheduling (`--leader-elect=false` to run alone).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// How long a leader's Lease is valid without renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Name of the Lease.
    #[arg(long, default_value = "kube-scheduler")]
    leader_elect_resource_name: String,
    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system")]
    leader_elect_resource_namespace: String,
    /// Only `leases` is supported.
    #[arg(long, default_value = "leases")]
    leader_elect_resource_lock: String,
    /// Bindings in flight at once.
    #[arg(long, default_value_t = 64)]
    bind_concurrency: usize,
    /// How long a pod's PreBind waits for its PersistentVolumeClaims to be bound
    /// (kube-scheduler's VolumeBindingArgs.bindTimeoutSeconds; not one of its flags).
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    volume_bind_timeout: Duration,
    /// Log verbosity (0-1 info, 2-3 debug, 4+ trace); RUST_LOG overrides.
    #[arg(long = "v", default_value_t = 0)]
    verbosity: u8,
}

fn init_tracing(verbosity: u8) {
    let default = match verbosity {
        0 | 1 => "info",
        2 | 3 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "{default},kube=warn,tower=warn,hyper=warn,h2=warn"
        ))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(
            std::env::var_os("NO_COLOR").is_none()
                && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        )
        .with_writer(std::io::stderr)
        .init();
}

async fn kube_client(flags: &Flags) -> Result<kube::Client> {
    let config = deckhand::config::kubeconfig::client_config(flags.kubeconfig.as_deref())
        .await
        .context("loading the kubeconfig")?;
    kube::Client::try_from(config).context("building the API client")
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    deckhand::abort_on_panic();
    let flags = Flags::parse();
    init_tracing(flags.verbosity);
    if flags.leader_elect_resource_lock != "leases" {
        bail!("--leader-elect-resource-lock: only \"leases\" is supported");
    }
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
        .to_lowercase();
    let client = kube_client(&flags).await?;
    let cfg = Config {
        scheduler_name: flags.scheduler_name.clone(),
        hostname: hostname.clone(),
        bind_concurrency: flags.bind_concurrency,
        volume_bind_timeout: flags.volume_bind_timeout,
    };
    tracing::info!(scheduler = %cfg.scheduler_name, leader_elect = flags.leader_elect,
        version = %deckhand::KUBE_VERSION, "deckhand-scheduler starting");

    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            shutdown.cancel();
        });
    }

    if !flags.leader_elect {
        runner::run(client, cfg, shutdown.clone()).await;
        tracing::info!("stopped");
        return Ok(());
    }

    let identity = format!("{hostname}_{:032x}", rand::random::<u128>());
    let mut elector = Elector::new(
        client.clone(),
        ElectionConfig {
            namespace: flags.leader_elect_resource_namespace.clone(),
            name: flags.leader_elect_resource_name.clone(),
            identity,
            lease_duration: flags.leader_elect_lease_duration,
            renew_deadline: flags.leader_elect_renew_deadline,
            retry_period: flags.leader_elect_retry_period,
        },
    );
    loop {
        if !elector.acquire(&shutdown).await {
            break;
        }
        // one term of leadership: schedule until the lease is lost or we are told to stop
        let term = shutdown.child_token();
        let scheduling = tokio::spawn(runner::run(client.clone(), cfg.clone(), term.clone()));
        let end = elector.hold(&shutdown).await;
        term.cancel();
        let _ = scheduling.await;
        match end {
            HoldEnd::Cancelled => {
                elector.release().await;
                break;
            }
            HoldEnd::Lost => {
                tracing::error!(
                    "leader election lost; stopped scheduling, trying to acquire again"
                );
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
}
