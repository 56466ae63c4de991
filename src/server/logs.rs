//! Container logs for `/containerLogs/{ns}/{pod}/{container}`: the query (v1 `PodLogOptions`),
//! the CRI log format, and the reader that follows a log file across rotations.
//!
//! Mirrors k8s.io/cri-client `pkg/logs` (`ReadLogs`, `parseCRILog`, `logWriter`,
//! `findTailLineStartIndex`) at the pinned version, byte for byte where a user can see it:
//! - each record is `<RFC3339Nano> <stdout|stderr> <P|F> <content>`; `P` (partial) records are
//!   written without their newline so that they join with the following record;
//! - `timestamps` prefixes each *logical* line with the fixed-width RFC3339Nano timestamp and a
//!   space; `sinceSeconds`/`sinceTime` drop records older than the later of the two;
//! - `tailLines` counts file records from the end (a partial record counts as one, as in Go);
//! - `limitBytes` counts the bytes written, prefixes included, and cuts the last line short;
//! - `follow` reads on until the container stops running; a rotated file (renamed, then reopened
//!   by the runtime through `ReopenContainerLog`) is drained and the new file read from its start.
//!
//! The parsing and filtering are pure ([`parse_cri_line`], [`LogWriter`], [`tail_start`]); the
//! reader ([`read_logs`]) is the thin I/O around them.

use crate::cri::CriClient;
use bytes::Bytes;
use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use std::collections::HashMap;
use std::io::SeekFrom;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// v1 `PodLogOptions` as the kubelet reads them from the query string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodLogOptions {
    /// Keep streaming until the container stops.
    pub follow: bool,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
    /// Only records newer than this many seconds.
    pub since_seconds: Option<i64>,
    /// Only records at or after this time.
    pub since_time: Option<DateTime<FixedOffset>>,
    /// Prefix each line with its timestamp.
    pub timestamps: bool,
    /// Only the last N records.
    pub tail_lines: Option<i64>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<i64>,
}

/// Why a log query was refused, with the Go kubelet's status and body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// 400 `{"message": "Unable to decode query."}`.
    #[error(r#"{{"message": "Unable to decode query."}}"#)]
    Decode,
    /// 422 `{"message": "Invalid request."}`.
    #[error(r#"{{"message": "Invalid request."}}"#)]
    Invalid,
    /// 400: a stream other than `All` (PodLogsQuerySplitStreams is alpha and off).
    #[error("unable to return the given log stream: {0:?}. Please enable PodLogsQuerySplitStreams feature gate in kubelet")]
    Stream(String),
}

/// apimachinery's query → bool conversion: absent, `0` or `false` (any case) are false,
/// anything else (even empty) is true.
fn query_bool(v: Option<&String>) -> bool {
    match v {
        None => false,
        Some(s) => !(s == "0" || s.eq_ignore_ascii_case("false")),
    }
}

fn query_int(v: Option<&String>) -> Result<Option<i64>, QueryError> {
    v.map(|s| s.parse::<i64>().map_err(|_| QueryError::Decode))
        .transpose()
}

impl PodLogOptions {
    /// Decodes and validates the query (first value of each parameter), as the Go kubelet's
    /// `getContainerLogs` does: legacy `tail` (`all` = no limit) overrides `tailLines`; then
    /// `ValidatePodLogOptions` (tailLines ≥ 0, limitBytes ≥ 1, sinceSeconds ≥ 1, not both since
    /// values).
    pub fn from_query(q: &HashMap<String, String>) -> Result<Self, QueryError> {
        let mut tail_lines = query_int(q.get("tailLines"))?;
        if let Some(t) = q.get("tail").filter(|t| !t.is_empty()) {
            tail_lines = if t == "all" {
                None
            } else {
                Some(t.parse::<i64>().map_err(|_| QueryError::Decode)?)
            };
        }
        let since_time = match q.get("sinceTime") {
            None => None,
            Some(s) => Some(DateTime::parse_from_rfc3339(s).map_err(|_| QueryError::Decode)?),
        };
        let o = PodLogOptions {
            follow: query_bool(q.get("follow")),
            previous: query_bool(q.get("previous")),
            since_seconds: query_int(q.get("sinceSeconds"))?,
            since_time,
            timestamps: query_bool(q.get("timestamps")),
            tail_lines,
            limit_bytes: query_int(q.get("limitBytes"))?,
        };
        if o.tail_lines.is_some_and(|t| t < 0)
            || o.limit_bytes.is_some_and(|b| b < 1)
            || (o.since_seconds.is_some() && o.since_time.is_some())
            || o.since_seconds.is_some_and(|s| s < 1)
        {
            return Err(QueryError::Invalid);
        }
        if let Some(s) = q.get("stream") {
            if s != "All" {
                return Err(QueryError::Stream(s.clone()));
            }
        }
        Ok(o)
    }

    /// The earliest timestamp to show: the later of `now - sinceSeconds` and `sinceTime`
    /// (kuberuntime `ReadLogs`).
    pub fn since(&self, now: DateTime<Utc>) -> Option<DateTime<FixedOffset>> {
        let from_secs = self
            .since_seconds
            .map(|s| (now - chrono::Duration::seconds(s)).fixed_offset());
        match (from_secs, self.since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Output stream of a log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The container's stdout.
    Stdout,
    /// The container's stderr.
    Stderr,
}

/// One parsed CRI log record.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord<'a> {
    /// When the runtime wrote it.
    pub timestamp: DateTime<FixedOffset>,
    /// stdout or stderr.
    pub stream: Stream,
    /// The content: for a full (`F`) record including its newline, for a partial (`P`) one
    /// without.
    pub content: &'a [u8],
}

/// Parses one record (with or without its trailing newline) of the CRI log format
/// `<RFC3339Nano> <stream> <tag>[:<more tags>] <content>` (cri-client `parseCRILog`).
pub fn parse_cri_line(line: &[u8]) -> Result<LogRecord<'_>, String> {
    let mut rest = line;
    let idx = rest
        .iter()
        .position(|&b| b == b' ')
        .ok_or("timestamp is not found")?;
    let ts = std::str::from_utf8(&rest[..idx]).map_err(|_| "timestamp is not UTF-8")?;
    let timestamp = DateTime::parse_from_rfc3339(ts)
        .map_err(|e| format!("unexpected timestamp {ts:?}: {e}"))?;
    rest = &rest[idx + 1..];
    let idx = rest
        .iter()
        .position(|&b| b == b' ')
        .ok_or("stream type is not found")?;
    let stream = match &rest[..idx] {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(format!(
                "unexpected stream type {:?}",
                String::from_utf8_lossy(other)
            ))
        }
    };
    rest = &rest[idx + 1..];
    let idx = rest
        .iter()
        .position(|&b| b == b' ')
        .ok_or("log tag is not found")?;
    let tag = &rest[..idx];
    let partial = tag.split(|&b| b == b':').next() == Some(b"P");
    if partial && rest.last() == Some(&b'\n') {
        rest = &rest[..rest.len() - 1];
    }
    Ok(LogRecord {
        timestamp,
        stream,
        content: &rest[idx + 1..],
    })
}

/// The fixed-width RFC3339Nano of Go's `RFC3339NanoFixed` (`2006-01-02T15:04:05.000000000Z07:00`).
pub fn format_timestamp(t: &DateTime<FixedOffset>) -> String {
    if t.offset().local_minus_utc() == 0 {
        t.with_timezone(&Utc)
            .to_rfc3339_opts(SecondsFormat::Nanos, true)
    } else {
        t.to_rfc3339_opts(SecondsFormat::Nanos, false)
    }
}

/// Decides what of each record is written (cri-client `logWriter` + the `isNewLine` tracking of
/// `ReadLogs`).
#[derive(Debug, Clone)]
pub struct LogWriter {
    since: Option<DateTime<FixedOffset>>,
    timestamps: bool,
    /// Bytes still allowed (`i64::MAX` without limitBytes).
    remain: i64,
    /// Whether the next record starts a logical line (gets the timestamp prefix).
    new_line: bool,
    /// Records left to write in tail mode without follow (`None`: unlimited).
    records_left: Option<i64>,
}

/// What the writer says after a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Go on reading.
    More,
    /// The byte limit or the tail count is reached: stop.
    Done,
}

impl LogWriter {
    /// A writer for `opts`, with `since` already resolved against the clock.
    pub fn new(opts: &PodLogOptions, since: Option<DateTime<FixedOffset>>) -> Self {
        LogWriter {
            since,
            timestamps: opts.timestamps,
            remain: opts.limit_bytes.unwrap_or(i64::MAX),
            new_line: true,
            records_left: if opts.follow { None } else { opts.tail_lines },
        }
    }

    /// True when nothing more may be written (tail count 0 at the start, or limit reached).
    pub fn done(&self) -> bool {
        self.remain <= 0 || self.records_left == Some(0)
    }

    /// Appends what `rec` contributes to `out`.
    pub fn write(&mut self, rec: &LogRecord<'_>, out: &mut Vec<u8>) -> Written {
        if self.since.is_some_and(|s| rec.timestamp < s) {
            // Skipped records still count for the tail and still change the line state as Go
            // does (it updates isNewLine after every parsed record).
        } else {
            let start = out.len();
            if self.timestamps && self.new_line {
                out.extend_from_slice(format_timestamp(&rec.timestamp).as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(rec.content);
            let written = (out.len() - start) as i64;
            if written > self.remain {
                out.truncate(start + self.remain as usize);
                self.remain = 0;
            } else {
                self.remain -= written;
            }
            if self.remain <= 0 {
                return Written::Done;
            }
        }
        if let Some(n) = self.records_left.as_mut() {
            *n -= 1;
        }
        self.new_line = rec.content.last().is_none_or(|&b| b == b'\n');
        if self.records_left == Some(0) {
            Written::Done
        } else {
            Written::More
        }
    }
}

/// The offset at which the last `n` newline-terminated records of `data` begin (cri-client
/// `findTailLineStartIndex`: a trailing incomplete record is not counted). `None` = all.
pub fn tail_start(data: &[u8], n: Option<i64>) -> usize {
    let Some(n) = n else { return 0 };
    let mut count = 0i64;
    // Walk back over newlines; the record after the (n+1)-th newline from the end starts it.
    let end = data.len();
    let mut i = end;
    while i > 0 {
        i -= 1;
        if data[i] == b'\n' {
            count += 1;
            if count > n {
                return i + 1;
            }
        }
    }
    0
}

/// A chunk of the HTTP response body.
pub type BodyTx = mpsc::Sender<Bytes>;

/// Why reading logs failed after the response began or before it could.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The log file could not be opened or read.
    #[error("failed to read log file {path:?}: {source}")]
    Io {
        /// The log file (from CRI `ContainerStatus.log_path`).
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// How often a followed file is checked for growth or rotation.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// How often the runtime is asked whether a followed container still runs (cri-client's
/// `logForceCheckPeriod`).
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// Read size.
const CHUNK: usize = 64 * 1024;

async fn container_running(cri: &CriClient, id: &str) -> bool {
    match cri.container_status(id).await {
        Ok(s) => s.state == crate::cri::api::ContainerState::ContainerRunning as i32,
        // The Go reader assumes a container still runs while the runtime is unavailable.
        Err(crate::cri::CriError::Rpc { code, .. }) if code == tonic::Code::Unavailable => true,
        Err(_) => false,
    }
}

/// Reads the CRI log file at `path` (taken from the runtime's ContainerStatus, never from the
/// request) of container `container_id` into `tx` according to `opts`. Returns when done, when
/// the container stopped (follow), or when the client went away (`tx` closed).
pub async fn read_logs(
    path: PathBuf,
    container_id: String,
    opts: PodLogOptions,
    cri: CriClient,
    tx: BodyTx,
) -> Result<(), ReadError> {
    let io_err = |source| ReadError::Io {
        path: path.clone(),
        source,
    };
    let mut file = tokio::fs::File::open(&path).await.map_err(io_err)?;
    let mut writer = LogWriter::new(&opts, opts.since(Utc::now()));
    if writer.done() {
        return Ok(());
    }
    // Start point for tailLines: scan backwards from the end in blocks.
    let start = match opts.tail_lines {
        None => 0,
        Some(n) => find_tail_offset(&mut file, n).await.map_err(io_err)?,
    };
    file.seek(SeekFrom::Start(start)).await.map_err(io_err)?;
    let mut ino = file.metadata().await.map_err(io_err)?.ino();

    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let mut running = opts.follow;
    // The first wait asks the runtime at once (a stopped container is not waited for).
    let mut last_check = Instant::now()
        .checked_sub(RUNNING_CHECK)
        .unwrap_or_else(Instant::now);
    let mut rotated_drain = false;
    loop {
        let n = file.read(&mut buf).await.map_err(io_err)?;
        if n > 0 {
            pending.extend_from_slice(&buf[..n]);
            let mut out = Vec::new();
            let mut consumed = 0;
            let mut done = false;
            while let Some(nl) = pending[consumed..].iter().position(|&b| b == b'\n') {
                let line = &pending[consumed..consumed + nl + 1];
                consumed += nl + 1;
                match parse_cri_line(line) {
                    Ok(rec) => {
                        if writer.write(&rec, &mut out) == Written::Done {
                            done = true;
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(path = %path.display(), error = %e, "unparsable log line skipped")
                    }
                }
            }
            pending.drain(..consumed);
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                return Ok(()); // client gone
            }
            if done {
                return Ok(());
            }
            continue;
        }
        // End of file.
        if !opts.follow {
            // A trailing record without newline is written too (Go: "Incomplete line").
            if !pending.is_empty() {
                if let Ok(rec) = parse_cri_line(&pending) {
                    let mut out = Vec::new();
                    writer.write(&rec, &mut out);
                    let _ = tx.send(Bytes::from(out)).await;
                }
            }
            return Ok(());
        }
        if rotated_drain {
            // The old file is drained after a rotation: continue with the new one.
            rotated_drain = false;
            match tokio::fs::File::open(&path).await {
                Ok(f) => {
                    file = f;
                    ino = file.metadata().await.map_err(io_err)?.ino();
                    pending.clear();
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        if !running {
            return Ok(());
        }
        // Wait for growth, rotation, the container's end, or the client's.
        let pos = file.stream_position().await.map_err(io_err)?;
        loop {
            if tx.is_closed() {
                return Ok(());
            }
            if last_check.elapsed() >= RUNNING_CHECK {
                last_check = Instant::now();
                if !container_running(&cri, &container_id).await {
                    // Read what is left, then stop at the next end of file.
                    running = false;
                    break;
                }
            }
            match tokio::fs::metadata(&path).await {
                Ok(m) if m.ino() != ino => {
                    rotated_drain = true;
                    break;
                }
                Ok(m) if m.len() > pos => break,
                Ok(m) if m.len() < pos => {
                    // Truncated in place (copytruncate): start over.
                    file.seek(SeekFrom::Start(0)).await.map_err(io_err)?;
                    pending.clear();
                    break;
                }
                _ => {}
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

/// The start offset of the last `n` records of an open file, reading backwards in blocks.
async fn find_tail_offset(file: &mut tokio::fs::File, n: i64) -> std::io::Result<u64> {
    const BLOCK: u64 = 4096;
    let size = file.seek(SeekFrom::End(0)).await?;
    let mut right = size;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let left = right.saturating_sub(BLOCK);
        let mut block = vec![0u8; (right - left) as usize];
        file.seek(SeekFrom::Start(left)).await?;
        file.read_exact(&mut block).await?;
        block.extend_from_slice(&tail);
        tail = block;
        let newlines = tail.iter().filter(|&&b| b == b'\n').count() as i64;
        if newlines > n || left == 0 {
            let off = tail_start(&tail, Some(n));
            return Ok(left + off as u64);
        }
        right = left;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn opts(pairs: &[(&str, &str)]) -> PodLogOptions {
        PodLogOptions::from_query(&q(pairs)).unwrap()
    }

    /// Runs records through a writer as the reader does.
    fn render(lines: &[&str], o: &PodLogOptions, since: Option<DateTime<FixedOffset>>) -> String {
        let mut w = LogWriter::new(o, since);
        let mut out = Vec::new();
        if w.done() {
            return String::new();
        }
        for l in lines {
            let rec = parse_cri_line(l.as_bytes()).unwrap();
            if w.write(&rec, &mut out) == Written::Done {
                break;
            }
        }
        String::from_utf8(out).unwrap()
    }

    const LOG: &[&str] = &[
        "2026-11-29T18:18:51.982716919Z stdout F out 1\n",
        "2026-11-29T18:18:51.98277Z stderr F err 1\n",
        "2026-11-29T18:18:52.1Z stdout P part-a \n",
        "2026-11-29T18:18:52.2Z stdout P part-b \n",
        "2026-11-29T18:18:52.3Z stdout F end\n",
        "2026-11-29T18:18:53Z stderr F err 2\n",
    ];

    #[test]
    fn parses_full_and_partial_records() {
        let r = parse_cri_line(b"2026-11-29T18:18:51.982716919Z stdout F hello world\n").unwrap();
        assert_eq!(r.stream, Stream::Stdout);
        assert_eq!(r.content, b"hello world\n");
        let r = parse_cri_line(b"2026-11-29T18:25:06.0236191Z stderr P no newline\n").unwrap();
        assert_eq!(r.stream, Stream::Stderr);
        assert_eq!(r.content, b"no newline");
        // forward-compatible tags
        let r = parse_cri_line(b"2026-11-29T18:25:06Z stdout P:x y\n").unwrap();
        assert_eq!(r.content, b"y");
        // empty content
        let r = parse_cri_line(b"2026-11-29T18:25:06Z stdout F \n").unwrap();
        assert_eq!(r.content, b"\n");
    }

    #[test]
    fn rejects_malformed_records() {
        assert!(parse_cri_line(b"garbage").is_err());
        assert!(parse_cri_line(b"2026-11-29T18:25:06Z stdin F x\n").is_err());
        assert!(parse_cri_line(b"notatime stdout F x\n").is_err());
        assert!(parse_cri_line(b"2026-11-29T18:25:06Z stdout\n").is_err());
    }

    #[test]
    fn plain_output_joins_partials_and_keeps_both_streams() {
        assert_eq!(
            render(LOG, &opts(&[]), None),
            "out 1\nerr 1\npart-a part-b end\nerr 2\n"
        );
    }

    #[test]
    fn timestamps_prefix_logical_lines_in_fixed_width() {
        assert_eq!(
            render(LOG, &opts(&[("timestamps", "true")]), None),
            "2026-11-29T18:18:51.982716919Z out 1\n\
             2026-11-29T18:18:51.982770000Z err 1\n\
             2026-11-29T18:18:52.100000000Z part-a part-b end\n\
             2026-11-29T18:18:53.000000000Z err 2\n"
        );
    }

    #[test]
    fn limit_bytes_cuts_the_last_line() {
        assert_eq!(
            render(LOG, &opts(&[("limitBytes", "8")]), None),
            "out 1\ner"
        );
        assert_eq!(
            render(
                LOG,
                &opts(&[("limitBytes", "40"), ("timestamps", "1")]),
                None
            ),
            "2026-11-29T18:18:51.982716919Z out 1\n202"
        );
    }

    #[test]
    fn since_drops_older_records() {
        let since = DateTime::parse_from_rfc3339("2026-11-29T18:18:52.15Z").unwrap();
        // The first partial is older, so it is dropped; the rest of its line remains (as in Go).
        assert_eq!(render(LOG, &opts(&[]), Some(since)), "part-b end\nerr 2\n");
    }

    #[test]
    fn since_is_the_later_of_seconds_and_time() {
        let now = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let o = PodLogOptions {
            since_seconds: Some(60),
            ..Default::default()
        };
        assert_eq!(
            o.since(now).unwrap(),
            DateTime::parse_from_rfc3339("2026-11-29T11:59:00Z").unwrap()
        );
        let o = opts(&[("sinceTime", "2026-11-29T11:00:00Z")]);
        assert_eq!(
            o.since(now).unwrap(),
            DateTime::parse_from_rfc3339("2026-11-29T11:00:00Z").unwrap()
        );
        assert_eq!(PodLogOptions::default().since(now), None);
    }

    #[test]
    fn tail_counts_file_records_from_the_end() {
        let data = LOG.concat();
        let start = tail_start(data.as_bytes(), Some(2));
        assert_eq!(
            &data[start..],
            "2026-11-29T18:18:52.3Z stdout F end\n2026-11-29T18:18:53Z stderr F err 2\n"
        );
        assert_eq!(tail_start(data.as_bytes(), Some(0)), data.len());
        assert_eq!(tail_start(data.as_bytes(), Some(100)), 0);
        assert_eq!(tail_start(data.as_bytes(), None), 0);
        // An incomplete last record is not counted.
        let inc = format!("{data}2026-11-29T18:18:54Z stdout F x");
        let s = tail_start(inc.as_bytes(), Some(1));
        assert!(inc[s..].starts_with("2026-11-29T18:18:53Z"));
    }

    #[test]
    fn tail_zero_writes_nothing() {
        let o = opts(&[("tailLines", "0")]);
        assert!(LogWriter::new(&o, None).done());
    }

    #[test]
    fn tail_mode_stops_after_n_records() {
        let data = LOG.concat();
        let o = opts(&[("tailLines", "3")]);
        let start = tail_start(data.as_bytes(), o.tail_lines);
        let lines: Vec<&str> = data[start..].split_inclusive('\n').collect();
        assert_eq!(render(&lines, &o, None), "part-b end\nerr 2\n");
    }

    #[test]
    fn query_decoding_and_validation_follow_the_go_kubelet() {
        let o = opts(&[
            ("follow", "true"),
            ("previous", "1"),
            ("timestamps", "TRUE"),
            ("tailLines", "5"),
            ("limitBytes", "100"),
            ("sinceSeconds", "10"),
        ]);
        assert!(o.follow && o.previous && o.timestamps);
        assert_eq!(o.tail_lines, Some(5));
        assert_eq!(o.limit_bytes, Some(100));
        assert_eq!(o.since_seconds, Some(10));
        assert!(!opts(&[("follow", "false")]).follow);
        assert!(!opts(&[("follow", "0")]).follow);
        assert!(opts(&[("follow", "")]).follow);
        assert_eq!(opts(&[("tail", "7")]).tail_lines, Some(7));
        assert_eq!(
            opts(&[("tail", "all"), ("tailLines", "3")]).tail_lines,
            None
        );
        let err = |p: &[(&str, &str)]| PodLogOptions::from_query(&q(p)).unwrap_err();
        assert_eq!(err(&[("tailLines", "x")]), QueryError::Decode);
        assert_eq!(err(&[("sinceTime", "yesterday")]), QueryError::Decode);
        assert_eq!(err(&[("tailLines", "-1")]), QueryError::Invalid);
        assert_eq!(err(&[("limitBytes", "0")]), QueryError::Invalid);
        assert_eq!(err(&[("sinceSeconds", "0")]), QueryError::Invalid);
        assert_eq!(
            err(&[("sinceSeconds", "5"), ("sinceTime", "2026-11-29T11:00:00Z")]),
            QueryError::Invalid
        );
        assert!(matches!(
            err(&[("stream", "Stdout")]),
            QueryError::Stream(_)
        ));
        assert!(PodLogOptions::from_query(&q(&[("stream", "All")])).is_ok());
        assert_eq!(
            QueryError::Invalid.to_string(),
            r#"{"message": "Invalid request."}"#
        );
    }

    #[tokio::test]
    async fn tail_offset_of_a_file_spanning_blocks() {
        let dir = std::env::temp_dir().join(format!("deckhand-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("0.log");
        let mut data = String::new();
        for i in 0..2000 {
            data.push_str(&format!("2026-11-29T18:18:51Z stdout F line {i}\n"));
        }
        std::fs::write(&p, &data).unwrap();
        let mut f = tokio::fs::File::open(&p).await.unwrap();
        let off = find_tail_offset(&mut f, 3).await.unwrap() as usize;
        assert!(data[off..].starts_with("2026-11-29T18:18:51Z stdout F line 1997\n"));
        let off = find_tail_offset(&mut f, 5000).await.unwrap();
        assert_eq!(off, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
