//! The vocabulary of Weir (`docs/design/vocabulary.md`): execution and delay ids, join set ids, function names,
//! history events, responses and results. Pure data, no I/O.
//!
//! Every type is `Clone + PartialEq + Debug` and serde-serialisable (ids and FFQNs as their
//! canonical strings, enums tagged), so codecs can be written against serde or by hand.
//! Parameters are JSON arrays and results JSON values (`serde_json::Value`).
//!
//! - [`ids`]: [`ExecutionId`] (`E_<ulid>`, children `E_<ulid>.g:1_1`), [`DelayId`]
//!   (`Delay_<ulid>.o:1-sleep_1`) and [`EventRequestId`] (`Event_<ulid>.o:1-await-event_1`),
//!   with the exact grammar.
//! - [`join_set`]: [`JoinSetId`] (`o:` one-off, `g:` generated, `n:` named) and name rules.
//! - [`ffqn`]: [`Ffqn`], `namespace:package/interface[@version].function`.
//! - [`event`]: [`HistoryEvent`] and its parts; [`Version`], an index into a history.
//! - [`response`]: [`Response`], what arrives for a join set.
//! - [`inbound`]: events sent into executions: name and id rules, [`EventOutcome`].
//! - [`result`]: [`ExecutionResult`] and [`ExecutionError`].

pub mod event;
pub mod ffqn;
pub mod ids;
pub mod inbound;
pub mod join_set;
pub mod response;
pub mod result;

pub use event::{
    ChildKind, HistoryEvent, JoinSetRequest, PersistValue, ScheduleAt, StubOutcome, Version,
};
pub use ffqn::{Ffqn, FfqnError, FfqnErrorKind};
pub use ids::{DelayId, EventRequestId, ExecutionId, ParseIdError, ParseIdErrorKind, Step};
pub use inbound::{EventNameError, EventOutcome, check_event_id, check_event_name, is_plain_name};
pub use join_set::{JoinSetId, JoinSetIdError, JoinSetKind};
pub use response::{DelayOutcome, Ran, Response};
pub use result::{ExecutionError, ExecutionErrorKind, ExecutionResult};
