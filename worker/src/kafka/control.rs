//! Fleet controls over Kafka (`docs/design/pause.md#routes`): `weir.control` is compacted and
//! has one partition; a client sets a switch with a record keyed by what it controls
//! ([`ControlKey`]) and clears it with a tombstone; every worker follows the topic from its
//! beginning ([`follow`]) and a client reads it to its end ([`read`]). Both fold what they
//! read by the one rule, [`Controls::apply`].
//!
//! Both read without joining a group or committing; their consumers' group ids are in the
//! deployment's namespace (`<ns>.weir-control-…`), as every group of a deployment is, so the
//! documented ACLs cover them (`docs/security.md`).
//!
//! A record that does not decode, or a key that names nothing, is skipped with a warning that
//! names its offset: the topic holds operators' switches, not work, and the next record of
//! its key replaces it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{info, warn};
use weir_core::control::{ControlKey, Controls, RoutePause};

use super::KafkaConfig;
use crate::codec::{Codec, EncodeError, RecordPosition};
use crate::topology::{TopicRole, Topology};

/// How long a send may take before it fails.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client's read waits for the topic's end.
const READ_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot read {topic}: {source}")]
    Read {
        topic: String,
        source: Box<KafkaError>,
    },
    #[error("{topic} was not read to its end within {0:?}", READ_PATIENCE)]
    Slow { topic: String },
    #[error("cannot encode the pause of route `{route}`: {source}")]
    Encode {
        route: String,
        source: Box<EncodeError>,
    },
    #[error("cannot send `{key}` to {topic}: {source}")]
    Send {
        key: String,
        topic: String,
        source: Box<KafkaError>,
    },
}

/// Pauses the route whose request topic is `pause.route` (`Some`), or resumes `route`
/// (`None`: a tombstone), and waits until the broker has it.
pub async fn set_route(
    producer: &FutureProducer,
    codec: &Codec,
    topology: &Topology,
    route: &str,
    pause: Option<&RoutePause>,
) -> Result<(), ControlError> {
    let topic = &topology.topic(TopicRole::Control).name;
    let key = ControlKey::Route(route.to_owned()).to_string();
    let value = pause
        .map(|p| codec.encode(topic, p))
        .transpose()
        .map_err(|source| ControlError::Encode {
            route: route.to_owned(),
            source: Box::new(source),
        })?;
    let mut record: FutureRecord<'_, str, Vec<u8>> = FutureRecord::to(topic).key(&key);
    if let Some(value) = &value {
        record = record.payload(value);
    }
    producer
        .send(record, SEND_TIMEOUT)
        .await
        .map_err(|(source, _)| ControlError::Send {
            key,
            topic: topic.clone(),
            source: Box::new(source),
        })?;
    Ok(())
}

/// Folds one record of the control topic into `controls`; `false` if it was skipped.
fn fold(controls: &mut Controls, codec: &Codec, topic: &str, message: &impl Message) -> bool {
    let position = RecordPosition::at(topic, message.partition(), message.offset());
    let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
    let key = match ControlKey::parse(&key) {
        Ok(key) => key,
        Err(error) => {
            warn!(%error, %position, "control record skipped");
            return false;
        }
    };
    let value = match message.payload() {
        None => None,
        Some(bytes) => match codec.decode::<RoutePause>(bytes, &position) {
            Ok(pause) => Some(pause),
            Err(error) => {
                warn!(%error, %position, "control record skipped: it does not decode");
                return false;
            }
        },
    };
    controls.apply(&key, value);
    true
}

/// What `weir.control` says now: read to its end (blocking; a client's read).
pub fn read(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &Topology,
) -> Result<Controls, ControlError> {
    let topic = topology.topic(TopicRole::Control).name.clone();
    let failed = |source| ControlError::Read {
        topic: topic.clone(),
        source: Box::new(source),
    };
    let consumer: BaseConsumer = kafka
        .consumer(&kafka.group_id(&format!("weir-control-read-{}", ulid::Ulid::new())))
        .create()
        .map_err(failed)?;
    let (low, high) = consumer
        .fetch_watermarks(&topic, 0, READ_PATIENCE)
        .map_err(failed)?;
    let mut controls = Controls::default();
    if high <= low {
        return Ok(controls);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Beginning)
        .map_err(failed)?;
    consumer.assign(&assignment).map_err(failed)?;
    let until = Instant::now() + READ_PATIENCE;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                fold(&mut controls, codec, &topic, &message);
                if message.offset() + 1 >= high {
                    return Ok(controls);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(controls),
            Some(Err(error)) => return Err(failed(error)),
            None => {}
        }
        // Under read_committed the last offsets may be transaction markers, never delivered.
        let position = consumer.position().ok().and_then(|p| {
            p.find_partition(&topic, 0)
                .and_then(|e| e.offset().to_raw())
        });
        if position.is_some_and(|p| p >= high) {
            return Ok(controls);
        }
        if Instant::now() >= until {
            return Err(ControlError::Slow { topic });
        }
    }
}

/// Follows `weir.control` from its beginning for as long as the process runs: the receiver
/// holds what it says, updated as records come. A read that fails is tried again (logged);
/// what was read stands meanwhile.
pub fn follow(
    kafka: &KafkaConfig,
    codec: Arc<Codec>,
    topology: &Topology,
) -> Result<watch::Receiver<Controls>, ControlError> {
    let topic = topology.topic(TopicRole::Control).name.clone();
    let failed = |source| ControlError::Read {
        topic: topic.clone(),
        source: Box::new(source),
    };
    let consumer: StreamConsumer = kafka
        .consumer(&kafka.group_id(&format!("weir-control-follow-{}", ulid::Ulid::new())))
        .create()
        .map_err(failed)?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Beginning)
        .map_err(failed)?;
    consumer.assign(&assignment).map_err(failed)?;
    let (sender, receiver) = watch::channel(Controls::default());
    tokio::spawn(async move {
        let mut controls = Controls::default();
        loop {
            tokio::select! {
                () = sender.closed() => break,
                message = consumer.recv() => match message {
                    Ok(message) => {
                        if fold(&mut controls, &codec, &topic, &message) {
                            sender.send_if_modified(|now| {
                                let changed = *now != controls;
                                if changed {
                                    info!(paused_routes = ?controls.paused_route_names(), "fleet controls changed");
                                    *now = controls.clone();
                                }
                                changed
                            });
                        }
                    }
                    Err(error) => {
                        warn!(%error, %topic, "reading the fleet controls failed; trying again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
            }
        }
    });
    Ok(receiver)
}
