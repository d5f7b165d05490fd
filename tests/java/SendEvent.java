// Sends an event into a running Weir execution with nothing but the Apache Kafka Java client
// and Apache Avro: it knows Weir only through schemas/avro/event.avsc (README there). The
// record is an `InboundEvent` in Avro single-object encoding, keyed by its target (an
// execution id, or a correlation key such as `payment:order-42`), so that Kafka's default
// partitioner (murmur2, as Weir's) puts it on the partition that owns the target.
//
//   java -cp '<external-activity lib>/*' SendEvent.java \
//        <bootstrap> <events topic> <schemas/avro dir> <execution id or key> <name> <payload JSON> <event id>
//
// Prints `sent <topic>/<partition>@<offset>` once the broker has it.
import java.io.File;
import java.nio.ByteBuffer;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SendEvent {
    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: SendEvent <bootstrap> <topic> <schemas dir> <execution id> <name> <payload> <event id>");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1];
        Schema schema = new Schema.Parser().parse(new File(args[2], "event.avsc"));
        String target = args[3], name = args[4], payload = args[5], eventId = args[6];

        long nowMicros = System.currentTimeMillis() * 1000;
        GenericRecord sentAt = new GenericData.Record(schema.getField("sent_at").schema());
        sentAt.put("micros", nowMicros);
        sentAt.put("nanos", 0);
        GenericRecord event = new GenericData.Record(schema);
        event.put("event_id", eventId);
        event.put("target", target);
        event.put("name", name);
        event.put("payload", payload);
        event.put("sent_at", sentAt);
        ByteBuffer encoded = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), schema).encode(event);
        byte[] value = new byte[encoded.remaining()];
        encoded.get(value);

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        try (KafkaProducer<String, byte[]> producer =
                new KafkaProducer<>(props, new StringSerializer(), new ByteArraySerializer())) {
            RecordMetadata sent = producer.send(new ProducerRecord<>(topic, target, value)).get();
            System.out.println("sent " + sent.topic() + "/" + sent.partition() + "@" + sent.offset());
        }
    }
}
