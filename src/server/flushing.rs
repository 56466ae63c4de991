//! A streamed response body that is written out frame by frame, the way the Go kubelet writes
//! log responses through `k8s.io/apiserver/pkg/util/flushwriter` (a flush after every write).
//!
//! Why it matters: the API server serves `pods/log` over a websocket (`binary.k8s.io`, what the
//! conformance test "Pods should support retrieving logs from the container over websockets"
//! and any websocket client use) by copying the kubelet's response body into websocket messages
//! (`k8s.io/apimachinery/pkg/util/httpstream/wsstream`, `messageCopy`). That loop drops the bytes
//! of a read that returns data together with end-of-body. Go's HTTP client returns exactly that
//! when the last chunk and the chunked terminator (`0\r\n\r\n`) arrive in one TLS record, or
//! when the body has a `Content-Length`. hyper coalesces a body's last frame and its end into
//! one write when both are ready at once, so a short log came back empty through the websocket
//! path. With this wrapper hyper sees the body pause after each data frame, flushes what it
//! has, and writes the end separately: the data and the terminator never share a TLS record.

use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Wraps a body so that after each data frame its next poll returns `Pending` once (waking
/// itself at once), which makes hyper's HTTP/1 dispatcher flush the frame before it asks for
/// the next one or for the end of the body.
pub struct FlushEachFrame<B> {
    inner: B,
    /// A data frame was just returned: the next poll pauses once.
    pause: bool,
}

impl<B> FlushEachFrame<B> {
    pub fn new(inner: B) -> Self {
        FlushEachFrame {
            inner,
            pause: false,
        }
    }
}

impl<B: Body + Unpin> Body for FlushEachFrame<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if this.pause {
            this.pause = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            this.pause = frame.is_data();
        }
        polled
    }

    /// Never "ended" right after a data frame: hyper asks this after each frame and would
    /// otherwise write the frame and the end together.
    fn is_end_stream(&self) -> bool {
        !self.pause && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    #[derive(Default)]
    struct CountWakes(AtomicUsize);
    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What each poll of the body gives, as text: "data:<bytes>", "pending", "end".
    fn polls<B>(body: B, n: usize) -> (Vec<String>, usize)
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Debug,
    {
        let wakes = Arc::new(CountWakes::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut body = body;
        let mut seen = Vec::new();
        for _ in 0..n {
            let ended_before = body.is_end_stream();
            let step = match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Pending => "pending".to_string(),
                Poll::Ready(None) => "end".to_string(),
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => format!("data:{}", String::from_utf8_lossy(&d)),
                    Err(_) => "trailers".to_string(),
                },
                Poll::Ready(Some(Err(e))) => format!("error:{e:?}"),
            };
            let stop = step == "end" || ended_before;
            seen.push(step);
            if stop {
                break;
            }
        }
        (seen, wakes.0.load(Ordering::SeqCst))
    }

    fn ready_stream(
        chunks: &[&'static str],
    ) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes()))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[test]
    fn each_data_frame_is_followed_by_one_self_woken_pause() {
        // A stream whose frames and end are all ready at once: what a short log file gives.
        let (seen, wakes) = polls(FlushEachFrame::new(ready_stream(&["a\n", "b\n"])), 10);
        assert_eq!(seen, ["data:a\n", "pending", "data:b\n", "pending", "end"]);
        assert_eq!(
            wakes, 2,
            "each pause wakes the task, or the response would hang"
        );
    }

    #[test]
    fn without_the_wrapper_the_end_is_ready_right_after_the_last_frame() {
        // The behaviour the wrapper exists for: hyper would write "b\n" and the end together.
        let (seen, _) = polls(ready_stream(&["a\n", "b\n"]), 10);
        assert_eq!(seen, ["data:a\n", "data:b\n", "end"]);
    }

    #[test]
    fn a_full_body_is_never_reported_ended_with_its_data() {
        // Full says is_end_stream() once its data is taken; the wrapper delays that by a poll.
        let mut body = FlushEachFrame::new(Full::new(Bytes::from_static(b"only")));
        assert!(!body.is_end_stream());
        let (seen, wakes) = polls(&mut body, 10);
        assert_eq!(seen, ["data:only", "pending", "end"]);
        assert_eq!(wakes, 1);
        assert!(body.is_end_stream());
    }

    #[test]
    fn an_empty_body_ends_without_a_pause() {
        let (seen, wakes) = polls(FlushEachFrame::new(ready_stream(&[])), 10);
        assert_eq!(seen, ["end"]);
        assert_eq!(wakes, 0);
    }
}
