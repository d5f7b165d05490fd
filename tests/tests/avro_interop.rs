//! Weir's Avro framing against Apache Avro's reference implementation (Java): the fingerprint
//! in every single-object header must be the one any other Avro client computes for the same
//! schema, or their records and Weir's cannot be read by each other. (The worker e2e test
//! `an_activity_served_by_a_plain_kafka_client_outside_weir` exchanges real records.)

use std::collections::BTreeMap;

use weir::codec::schemas;
use weir_e2e::{external_classpath, java_program, repo_root};

#[test]
fn single_object_fingerprints_agree_with_apache_avro_java() {
    let all: Vec<_> = schemas::current()
        .iter()
        .chain(schemas::previous())
        .collect();
    let dir = repo_root().join("schemas/avro");
    let output = java_program(&external_classpath(), "AvroFingerprints.java")
        .args(all.iter().map(|s| dir.join(s.file)))
        .output()
        .expect("run AvroFingerprints.java (Java 17)");
    assert!(
        output.status.success(),
        "AvroFingerprints.java failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let java: BTreeMap<String, u64> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let (file, hex) = line.rsplit_once(' ').expect("`<file> <hex>`");
            let fingerprint = u64::from_str_radix(hex, 16).expect("hex fingerprint");
            (file.to_owned(), fingerprint)
        })
        .collect();
    assert_eq!(java.len(), all.len(), "one line per file: {java:#?}");
    let mut with_logical_types = 0;
    for schema in all {
        let path = dir.join(schema.file).display().to_string();
        assert_eq!(
            java.get(&path).copied(),
            Some(schema.fingerprint),
            "fingerprint of {} (Weir {:#018x}), canonical form {}",
            schema.file,
            schema.fingerprint,
            schemas::parsing_canonical_form(&schema.schema)
        );
        with_logical_types += usize::from(schema.legacy_fingerprint.is_some());
    }
    // The files exercise the case apache-avro gets wrong (logical types).
    assert!(with_logical_types > 0);
}
