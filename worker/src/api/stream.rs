//! Live views (issue 37 item 5): `GET /v1/executions/{id}/stream`, a server-sent event stream of
//! an execution's status, history and result, and [`Follower`], the one reading of "what is new
//! since seq N" that both the stream and `weir submit --follow` use.
//!
//! The store has no change feed, so each open stream polls it ([`POLL_INTERVAL`]): one
//! single-row read of the execution row per poll, and a read of the history rows after the last
//! one sent only when the row's history version says there are more. The materialiser writes an
//! execution row with (or after) its history rows, so the rows a row's version counts are
//! readable once the row is.
//!
//! Events (`event:` names; the data is one line of JSON):
//!
//! - `status`: the execution as `GET /v1/executions/{id}` returns it; sent first, and again
//!   whenever it changes.
//! - `history`: one history entry as the entries of `GET /v1/executions/{id}/history`, with the
//!   SSE `id:` set to its seq.
//! - `result`: `{"execution_id", "result", "finished_at"}`, once the execution has finished and
//!   every entry has been sent; the stream then ends.
//! - `waiting`: `{"execution_id", "gives_up_after_secs"}` while the store does not have the
//!   execution (a submission no worker has taken yet, or an id that never comes). A stream that
//!   has not seen the execution after [`WAIT_FOR_CREATION`] ends (a client may open another).
//! - `error`: `{"error": {"code", "message"}}`, then the stream ends: `internal` (a store
//!   failure, with the reference of the log line that has the cause) or `gone` (the execution
//!   was in the store and is no longer: its retention ended).
//!
//! Heartbeats are SSE comments every [`HEARTBEAT`]. A server that stops ends its streams.
//!
//! Invariants, per connection:
//!
//! - **Every entry once, in seq order.** A `history` event is sent only for the seq right after
//!   the last one sent ([`Follower::next_seq`]); an entry that is not readable yet (a gap)
//!   holds back the ones after it until a later poll reads it.
//! - **Resume is exact.** With `Last-Event-ID: N` (or `?after=N`; the header wins), the first
//!   entry sent is seq `N + 1`, and then every later one: exactly the entries after `N`.
//! - **`result` comes last**, after every entry the finished execution's history version counts.
//! - **Bounded work.** At most [`MAX_OPEN_STREAMS`] streams are open on a server (one more is
//!   answered `429 busy`); each reads at most [`MAX_ENTRIES_PER_READ`] history rows a poll.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::{Api, ApiError, ApiResult, Scope, authorize, parse_id};
use crate::codec::{Codec, DecodeError, HistoryRecord};
use crate::model::ExecutionId;
use crate::store::{ExecutionRow, ExecutionState, HistoryRow, Store, StoreError};

/// How often an open stream (and `weir submit --follow`) reads the store.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a stream sends a heartbeat comment when it has nothing else to send.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// How long a stream waits for an execution the store does not have before it ends.
pub const WAIT_FOR_CREATION: Duration = Duration::from_secs(600);
/// Streams a server keeps open at once.
pub const MAX_OPEN_STREAMS: usize = 256;
/// History rows one poll reads at most (a long history is sent over several polls).
pub const MAX_ENTRIES_PER_READ: usize = 1000;

/// What reading the store for a live view can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
    #[error("decoding a history record: {0}")]
    Decode(#[from] DecodeError),
}

/// What a poll found new.
#[derive(Debug, Clone)]
pub enum Update {
    /// The store does not have the execution (said once, until it does).
    Waiting,
    /// The execution row, when it differs from the last one reported.
    Status(ExecutionRow),
    /// The next history entry, in seq order (boxed: an entry is far larger than the rest).
    Entry(Box<(HistoryRow, HistoryRecord)>),
    /// The execution has finished and every entry has been reported: the last update.
    Finished(ExecutionRow),
    /// The execution was in the store and is no longer (its retention ended): the last update.
    Gone,
}

/// Follows one execution in the store: each [`Follower::poll`] says what is new since the
/// previous one. See the module docs for what it guarantees.
#[derive(Debug)]
pub struct Follower {
    id: ExecutionId,
    next_seq: i64,
    last_status: Option<ExecutionRow>,
    said_waiting: bool,
    done: bool,
}

impl Follower {
    /// Follows `id` from the entry after seq `after` (from the first entry when `None`).
    pub fn new(id: ExecutionId, after: Option<i64>) -> Self {
        Follower {
            id,
            next_seq: after.map_or(0, |seq| seq.saturating_add(1)),
            last_status: None,
            said_waiting: false,
            done: false,
        }
    }

    pub fn execution_id(&self) -> &ExecutionId {
        &self.id
    }

    /// The seq of the next entry to report: every entry before it has been reported (or was
    /// skipped by the resume point).
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// Whether the store has had the execution at some poll.
    pub fn seen(&self) -> bool {
        self.last_status.is_some()
    }

    /// Whether the last update ([`Update::Finished`] or [`Update::Gone`]) has been reported.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Reads the store once and says what is new, in this order: the status if it changed,
    /// the entries after the last one reported (only a gapless run from [`Self::next_seq`]),
    /// and [`Update::Finished`] once the execution has finished and every entry it counts has
    /// been reported. Nothing after the last update.
    pub async fn poll<S: Store>(
        &mut self,
        store: &S,
        codec: &Codec,
    ) -> Result<Vec<Update>, FollowError> {
        if self.done {
            return Ok(Vec::new());
        }
        let Some(row) = store.execution(&self.id).await? else {
            if self.seen() {
                self.done = true;
                return Ok(vec![Update::Gone]);
            }
            if self.said_waiting {
                return Ok(Vec::new());
            }
            self.said_waiting = true;
            return Ok(vec![Update::Waiting]);
        };
        let mut updates = Vec::new();
        if self.last_status.as_ref() != Some(&row) {
            self.last_status = Some(row.clone());
            updates.push(Update::Status(row.clone()));
        }
        if row.history_version > self.next_seq {
            let rows = store
                .history_after(&self.id, self.next_seq - 1, MAX_ENTRIES_PER_READ)
                .await?;
            let run: Vec<HistoryRow> = rows
                .into_iter()
                .zip(self.next_seq..)
                .take_while(|(row, seq)| row.seq == *seq)
                .map(|(row, _)| row)
                .collect();
            for (row, record) in crate::present::decode_history(codec, &run)? {
                self.next_seq = row.seq + 1;
                updates.push(Update::Entry(Box::new((row.clone(), record))));
            }
        }
        if row.state == ExecutionState::Finished && self.next_seq >= row.history_version {
            self.done = true;
            updates.push(Update::Finished(row));
        }
        Ok(updates)
    }
}

/// The streams open on a server: at most [`MAX_OPEN_STREAMS`], all ended when it stops.
#[derive(Debug)]
pub struct Streams {
    slots: Arc<tokio::sync::Semaphore>,
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_OPEN_STREAMS)),
            stopping: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl Streams {
    /// Ends every open stream (at its next poll) and refuses new ones: the server is
    /// stopping, and a graceful shutdown waits for open responses.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    fn open(&self) -> Result<(tokio::sync::OwnedSemaphorePermit, StopSignal), ApiError> {
        let stopping = self.stopping.subscribe();
        if *stopping.borrow() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "stopping",
                "the server is stopping",
            ));
        }
        let permit = Arc::clone(&self.slots).try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "busy",
                format!("{MAX_OPEN_STREAMS} streams are open on this server; retry in a second"),
            )
        })?;
        Ok((permit, StopSignal(stopping)))
    }
}

struct StopSignal(tokio::sync::watch::Receiver<bool>);

impl StopSignal {
    /// Resolves once the server is stopping (or its [`Streams`] is gone).
    async fn stopped(&mut self) {
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamQuery {
    /// Resume after this seq (the `Last-Event-ID` header wins).
    after: Option<String>,
}

/// The seq to resume after: the `Last-Event-ID` header, else `?after=`.
fn resume_point(headers: &HeaderMap, after: Option<&str>) -> Result<Option<i64>, ApiError> {
    let header = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))
        })
        .transpose()?;
    let Some((name, text)) = header
        .map(|h| ("Last-Event-ID", h))
        .or(after.map(|a| ("after", a)))
    else {
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() {
        // A client that has seen no entry yet may send an empty id.
        return Ok(None);
    }
    text.parse::<i64>()
        .ok()
        .filter(|seq| *seq >= 0)
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{name} `{text}` is not a history seq (a number from 0)"
            ))
        })
}

/// `GET /v1/executions/{id}/stream`: the execution's live view (see the module docs).
pub(super) async fn stream(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    authorize(&api, &headers, Scope::Read)?;
    let id = parse_id(&id)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let after = resume_point(&headers, query.after.as_deref())?;
    let (permit, stop) = api.streams.open()?;
    let span = tracing::info_span!("execution stream", execution = %id, after);
    tracing::debug!(parent: &span, "stream opened");
    let live = Live {
        api,
        follower: Follower::new(id, after),
        opened: Instant::now(),
        polled: false,
        stop,
        _permit: permit,
    };
    let events = futures::stream::unfold(live, move |mut live| {
        let span = span.clone();
        async move {
            let events = live.next_events().await?;
            Some((events, live))
        }
        .instrument(span)
    })
    .flat_map(futures::stream::iter)
    .map(Ok::<Event, Infallible>);
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response();
    // A proxy that buffers responses (nginx does by default) would hold the events back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// One open stream.
struct Live {
    api: Arc<Api>,
    follower: Follower,
    opened: Instant,
    polled: bool,
    stop: StopSignal,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Live {
    /// The events of the next poll (perhaps none); `None` once the stream ends.
    async fn next_events(&mut self) -> Option<Vec<Event>> {
        if self.follower.is_done() {
            return None;
        }
        if self.polled {
            tokio::select! {
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                () = self.stop.stopped() => return None,
            }
        }
        self.polled = true;
        if !self.follower.seen() && self.opened.elapsed() >= WAIT_FOR_CREATION {
            tracing::debug!("the execution did not come: stream ended");
            return None;
        }
        let updates = match self.follower.poll(&self.api.store, &self.api.codec).await {
            Ok(updates) => updates,
            Err(e) => {
                // The client may reconnect with the id of the last entry it has.
                let error = ApiError::internal(e);
                self.follower.done = true;
                return Some(vec![error_event(error.code, &error.message)]);
            }
        };
        let id = self.follower.execution_id().to_string();
        Some(
            updates
                .into_iter()
                .map(|update| match update {
                    Update::Waiting => event(
                        "waiting",
                        &json!({
                            "execution_id": id,
                            "gives_up_after_secs": WAIT_FOR_CREATION.as_secs(),
                        }),
                    ),
                    Update::Status(row) => event("status", &crate::present::execution_json(&row)),
                    Update::Entry(entry) => event(
                        "history",
                        &crate::present::history_entry_json(&entry.0, &entry.1),
                    )
                    .id(entry.1.seq.to_string()),
                    Update::Finished(row) => {
                        let shown = crate::present::execution_json(&row);
                        event(
                            "result",
                            &json!({
                                "execution_id": id,
                                "result": shown["result"],
                                "finished_at": shown["finished_at"],
                            }),
                        )
                    }
                    Update::Gone => error_event(
                        "gone",
                        &format!("{id} is no longer in the store (its retention ended)"),
                    ),
                })
                .collect(),
        )
    }
}

/// An event whose data is `data` as one line of JSON.
fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn error_event(code: &str, message: &str) -> Event {
    event(
        "error",
        &json!({"error": {"code": code, "message": message}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::HistoryEntry;
    use crate::store::InMemoryStore;

    fn id() -> ExecutionId {
        "E_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("id")
    }

    fn history_row(codec: &Codec, seq: i64, entry: HistoryEntry) -> HistoryRow {
        let record = HistoryRecord {
            execution_id: id(),
            seq: u64::try_from(seq).expect("a seq"),
            entry,
            at: None,
        };
        HistoryRow {
            execution_id: id(),
            seq,
            kind: crate::projection::entry_kind(&record.entry),
            record: codec.encode("history", &record).expect("encode"),
            kafka_partition: 0,
            kafka_offset: seq,
            recorded_at: chrono::Utc::now(),
        }
    }

    fn execution_row(version: i64, finished: bool) -> ExecutionRow {
        let now = chrono::Utc::now();
        ExecutionRow {
            execution_id: id(),
            ffqn: "a:b/c.d".to_owned(),
            parent_id: None,
            params: "[]".to_owned(),
            state: if finished {
                ExecutionState::Finished
            } else {
                ExecutionState::Running
            },
            result: finished.then(|| r#"{"ok":1}"#.to_owned()),
            history_version: version,
            kafka_partition: 0,
            created_at: now,
            updated_at: now,
            finished_at: finished.then_some(now),
        }
    }

    fn cancel(codec: &Codec, seq: i64) -> HistoryRow {
        history_row(
            codec,
            seq,
            HistoryEntry::CancelRequested {
                reason: format!("r{seq}"),
            },
        )
    }

    fn seqs(updates: &[Update]) -> Vec<i64> {
        updates
            .iter()
            .filter_map(|u| match u {
                Update::Entry(entry) => Some(entry.0.seq),
                _ => None,
            })
            .collect()
    }

    /// Waiting once while the store lacks it; then each entry once, in order, a gap holding
    /// back the entries after it; the result last; a resume point skips exactly the entries
    /// up to it.
    #[tokio::test]
    async fn each_entry_once_in_order_and_the_result_last() {
        let codec = Codec::single_object();
        let store = InMemoryStore::default();
        let mut follower = Follower::new(id(), None);
        assert!(matches!(
            follower.poll(&store, &codec).await.expect("poll")[..],
            [Update::Waiting]
        ));
        assert!(
            follower
                .poll(&store, &codec)
                .await
                .expect("poll")
                .is_empty()
        );

        // Seqs 0 and 2 readable, 1 not yet (its chunk not written): 0 alone.
        store
            .append_history(&[cancel(&codec, 0), cancel(&codec, 2)])
            .await
            .expect("append");
        store
            .put_execution(&execution_row(3, false))
            .await
            .expect("row");
        let updates = follower.poll(&store, &codec).await.expect("poll");
        assert!(matches!(updates[0], Update::Status(_)), "{updates:?}");
        assert_eq!(seqs(&updates), vec![0]);
        assert!(
            follower
                .poll(&store, &codec)
                .await
                .expect("poll")
                .is_empty()
        );

        store
            .append_history(&[cancel(&codec, 1), cancel(&codec, 3)])
            .await
            .expect("append");
        store
            .put_execution(&execution_row(4, true))
            .await
            .expect("row");
        let updates = follower.poll(&store, &codec).await.expect("poll");
        assert_eq!(seqs(&updates), vec![1, 2, 3]);
        assert!(matches!(updates.last(), Some(Update::Finished(_))));
        assert!(follower.is_done());
        assert!(
            follower
                .poll(&store, &codec)
                .await
                .expect("poll")
                .is_empty()
        );

        let mut resumed = Follower::new(id(), Some(1));
        let updates = resumed.poll(&store, &codec).await.expect("poll");
        assert_eq!(seqs(&updates), vec![2, 3]);
        assert!(matches!(updates.last(), Some(Update::Finished(_))));
    }

    #[test]
    fn the_resume_point_is_the_header_else_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_point(&headers, None).expect("none"), None);
        assert_eq!(resume_point(&headers, Some("4")).expect("query"), Some(4));
        headers.insert("last-event-id", HeaderValue::from_static("7"));
        assert_eq!(resume_point(&headers, Some("4")).expect("header"), Some(7));
        headers.insert("last-event-id", HeaderValue::from_static("-1"));
        assert!(resume_point(&headers, None).is_err());
        headers.insert("last-event-id", HeaderValue::from_static(""));
        assert_eq!(resume_point(&headers, None).expect("empty"), None);
        assert!(resume_point(&HeaderMap::new(), Some("x")).is_err());
    }
}
