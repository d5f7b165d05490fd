//! The simulated producer and consumer against the wire table.

use super::*;
use crate::sim::cluster::State;
use crate::wire::examples;

fn world_with_a_worker(start: SimTime) -> World {
    let mut world = World::new(SimConfig::default(), Faults::none(), Rng::new(1), start);
    let epoch = world.cluster.init_producer("w0", start);
    world.procs.insert(
        1,
        Proc {
            pid: 1,
            slot: 0,
            instance: "w0-p1".into(),
            status: Status::Running,
            transactional_id: "w0".into(),
            epoch,
            consumer: Consumer::default(),
            mat: MaterialiserQueue::default(),
            at: "start",
            idle: false,
            shutdown: false,
            open_txn: None,
            commits: 0,
            refused: false,
        },
    );
    world
}

/// The simulation's producer routes every effect by `wire::address` (the worker's
/// encoder does too: `weir::kafka::encode`'s tests): each record lands on the topic, with
/// the key and kind, the table gives, and its reader takes it for what it was written
/// as. Changing the table, or routing here by anything else, fails this.
#[test]
fn the_simulated_producer_appends_where_the_wire_table_says() {
    let start = chrono::DateTime::from_timestamp_millis(1_767_225_600_000).expect("a time");
    let mut world = world_with_a_worker(start);
    // The input a dead letter copies.
    world.proc(1).consumer.polled.insert(
        0,
        PolledCopy {
            topic: Topic::Submissions,
            partition: 0,
            offset: 7,
            key: Some("poison".into()),
            bytes: b"not Avro".to_vec(),
            timestamp: start,
        },
    );
    let effects = examples::one_of_each(start);
    let (txn, landed) = world.commit_begin(1, &effects).expect("a transaction");
    let written: Vec<(Topic, i32, &Record)> = world.cluster.txns[&txn]
        .written
        .iter()
        .map(|&(topic, partition, offset)| {
            (
                topic,
                partition,
                &world.cluster.log(topic, partition)[offset as usize],
            )
        })
        .collect();
    let expected: Vec<(Topic, i32, Option<String>, Option<RecordKind>)> = effects
        .iter()
        .filter_map(|effect| wire::address(effect).expect("an address"))
        // The simulated activity service is not told of cancellations, nor sent retry
        // notices (see `produce`).
        .filter(|address| {
            !matches!(
                address.kind,
                Some(RecordKind::Cancel | RecordKind::RetryActivity)
            )
        })
        .map(|address| {
            let (key, partitioned_by) = match &address.key {
                Key::OfInput(0) => ("poison", "poison"),
                Key::OfInput(other) => panic!("no input {other}"),
                key => (
                    key.exact().expect("a key"),
                    key.partitioned_by().expect("a key"),
                ),
            };
            let topic = Topic::of_destination(&address.destination);
            let partition = if topic == Topic::Dlq {
                0
            } else {
                world.cluster.partition_for(topic, partitioned_by)
            };
            (topic, partition, Some(key.to_owned()), address.kind)
        })
        .collect();
    let appended: Vec<(Topic, i32, Option<String>, Option<RecordKind>)> = written
        .iter()
        .map(|(topic, partition, record)| (*topic, *partition, record.key.clone(), record.kind))
        .collect();
    assert_eq!(appended, expected);
    for (topic, partition, record) in &written {
        assert_eq!(record.state, State::Pending(txn));
        if *topic != Topic::Dlq {
            // On its key's partition; an id a correlation key remembers, on the key's.
            let key = record.key.as_deref().expect("a key");
            let home = match crate::state_key::StateKey::parse(key) {
                Ok(crate::state_key::StateKey::Remembered { key, .. }) => key,
                _ => key.to_owned(),
            };
            assert_eq!(
                *partition,
                world.cluster.partition_for(*topic, &home),
                "{key}"
            );
        }
        // Every record on an input topic reads back as an input.
        let input = match topic {
            Topic::Submissions => Some(InputTopic::Submissions),
            Topic::Responses => Some(InputTopic::Responses),
            Topic::Events => Some(InputTopic::Events),
            _ => None,
        };
        if let Some(input) = input {
            assert!(decode(input, record).is_ok(), "{record:?}");
        }
    }
    assert_eq!(landed.len(), 1, "the one history record");
    assert!(world.anomalies.is_empty(), "{:?}", world.anomalies);
}

/// A record is read as what its topic and kind say, as the worker's decoder reads it: a
/// command without its kind is not taken for one.
#[test]
fn the_simulated_decoder_reads_by_topic_and_kind() {
    let start = chrono::DateTime::from_timestamp_millis(1_767_225_600_000).expect("a time");
    let command = crate::schedule::ScheduleCommand {
        name: "nightly".into(),
        command_id: "c-1".into(),
        action: crate::schedule::ScheduleAction::Pause,
        sent_at: start,
    };
    let record = |kind| Record {
        offset: 0,
        key: Some("schedule:nightly".into()),
        kind,
        payload: Some(Payload::ScheduleCommand(command.clone())),
        bytes: Vec::new(),
        producer: Producer::Client,
        state: State::Committed,
        timestamp: start,
    };
    assert_eq!(
        decode(InputTopic::Responses, &record(Some(RecordKind::Schedule))),
        Ok(Body::Schedule(command.clone()))
    );
    assert!(decode(InputTopic::Responses, &record(None)).is_err());
    assert!(decode(InputTopic::Submissions, &record(Some(RecordKind::Schedule))).is_err());
}
