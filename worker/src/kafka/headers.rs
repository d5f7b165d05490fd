//! The headers of the wire-address table ([`weir_core::wire`]) on Kafka messages: what a
//! polled record is, by its topic's role and its `weir.kind` header, and the kind header a
//! client writes. The table itself is the core's; this is its rdkafka edge.

use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use weir_core::wire::{self, KIND_HEADER, KindError, RecordKind, RecordType, TopicRole};

/// The value of `message`'s header `name` (the first, if it has several).
pub fn header<'a, M: Message>(message: &'a M, name: &str) -> Option<&'a [u8]> {
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// The kind `message` says it is (`None`: no [`KIND_HEADER`], its topic's own type).
pub fn kind<M: Message>(message: &M) -> Result<Option<RecordKind>, KindError> {
    RecordKind::of_header(header(message, KIND_HEADER))
}

/// What `message`, read from a topic of `role`, holds ([`wire::record_type`]).
pub fn record_type<M: Message>(message: &M, role: TopicRole) -> Result<RecordType, KindError> {
    wire::record_type(role, kind(message)?)
}

/// The headers of a record of `kind` (what a client sending one writes).
pub fn of_kind(kind: RecordKind) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header {
        key: KIND_HEADER,
        value: Some(kind.header_value()),
    })
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;
    use rdkafka::message::OwnedMessage;

    use super::*;

    fn message(headers: Option<OwnedHeaders>) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"value".to_vec()),
            Some(b"key".to_vec()),
            "weir.responses".into(),
            Timestamp::NotAvailable,
            0,
            0,
            headers,
        )
    }

    #[test]
    fn a_message_is_what_its_topic_and_kind_say() {
        assert_eq!(
            record_type(&message(None), TopicRole::Responses),
            Ok(RecordType::Response)
        );
        for kind in RecordKind::ALL {
            let read = record_type(&message(Some(of_kind(kind))), TopicRole::Responses);
            assert_eq!(read, wire::record_type(TopicRole::Responses, Some(kind)));
        }
        let unknown = OwnedHeaders::new().insert(Header {
            key: KIND_HEADER,
            value: Some(b"telepathy".as_slice()),
        });
        assert!(matches!(
            record_type(&message(Some(unknown)), TopicRole::Responses),
            Err(KindError::Unknown { .. })
        ));
    }
}
