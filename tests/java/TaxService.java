// An external Weir activity: serves `weir-examples:tax/rates.quote` from its route's topic with
// nothing but the Apache Kafka Java client and Apache Avro. It knows Weir only through the
// schemas in schemas/avro/ (README there): it reads `ActivityRequest`s (Avro single-object
// encoding) and answers each with a `Response` (`ChildExecutionFinished`) on the responses topic,
// keyed by the parent's execution id. Consuming the request and producing the answer happen in
// one Kafka transaction (read_committed input, offsets committed with the output), so a crash
// neither loses a request nor makes a second answer visible.
//
//   java -cp '<external-activity lib>/*' TaxService.java \
//        <bootstrap> <requests topic> <responses topic> <group id> <schemas/avro dir>
//
// Prints `ready` once it owns partitions, and one line per answered request.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TaxService {
    static final String FFQN = "weir-examples:tax/rates.quote";
    /** Rates in basis points. */
    static final Map<String, Integer> RATES = Map.of(
            "DE", 1900, "FR", 2000, "GB", 2000, "JP", 1000, "US-CA", 725);
    static final ObjectMapper JSON = new ObjectMapper();

    final Schema responseSchema;
    final Schema childFinishedSchema;
    final Schema executionResultSchema;
    final Schema resultOkSchema;
    final Schema resultErrSchema;
    final BinaryMessageDecoder<GenericRecord> requests;
    final BinaryMessageEncoder<GenericRecord> responses;

    TaxService(File schemas) throws Exception {
        Schema requestSchema = new Schema.Parser().parse(new File(schemas, "activity_request.avsc"));
        responseSchema = new Schema.Parser().parse(new File(schemas, "response.avsc"));
        childFinishedSchema = branch(responseSchema.getField("response").schema(), "ChildExecutionFinished");
        executionResultSchema = childFinishedSchema.getField("result").schema();
        Schema outcome = executionResultSchema.getField("outcome").schema();
        resultOkSchema = branch(outcome, "ResultOk");
        resultErrSchema = branch(outcome, "ResultErr");
        requests = new BinaryMessageDecoder<>(GenericData.get(), requestSchema);
        responses = new BinaryMessageEncoder<>(GenericData.get(), responseSchema);
    }

    static Schema branch(Schema union, String name) {
        return union.getTypes().stream()
                .filter(s -> s.getName().equals(name))
                .findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no union branch " + name));
    }

    /** The outcome (`ResultOk` / `ResultErr`, JSON text inside) of `quote(region, amount-cents)`. */
    GenericRecord quote(JsonNode params) {
        if (!params.isArray() || params.size() != 2 || !params.get(0).isTextual()
                || !params.get(1).canConvertToExactIntegral()) {
            return err("expected params [region: string, amount-cents: u64], got " + params);
        }
        String region = params.get(0).asText();
        long amount = params.get(1).asLong();
        Integer rate = RATES.get(region);
        if (rate == null) {
            return err("no tax rate for region " + region);
        }
        long tax = (amount * rate + 5_000) / 10_000;
        var quote = JSON.createObjectNode()
                .put("region", region)
                .put("rate-basis-points", rate)
                .put("tax-cents", tax);
        return outcome(resultOkSchema, quote.toString());
    }

    /** An `err` whose value is a WIT `string`: a JSON string. */
    GenericRecord err(String message) {
        return outcome(resultErrSchema, JSON.valueToTree(message).toString());
    }

    GenericRecord outcome(Schema branch, String json) {
        GenericRecord value = new GenericData.Record(branch);
        value.put("value", json);
        return value;
    }

    /** The `Response` answering one `ActivityRequest`; throws when the record is not one. */
    ProducerRecord<String, byte[]> answer(ConsumerRecord<String, byte[]> record, String responsesTopic)
            throws Exception {
        GenericRecord request = requests.decode(record.value());
        String ffqn = request.get("ffqn").toString();
        GenericRecord outcome;
        if (FFQN.equals(ffqn)) {
            outcome = quote(JSON.readTree(request.get("params").toString()));
        } else {
            outcome = err("TaxService does not serve " + ffqn);
        }
        GenericRecord result = new GenericData.Record(executionResultSchema);
        result.put("outcome", outcome);
        GenericRecord finished = new GenericData.Record(childFinishedSchema);
        finished.put("child_execution_id", request.get("execution_id").toString());
        finished.put("result", result);
        GenericRecord response = new GenericData.Record(responseSchema);
        response.put("response", finished);
        ByteBuffer encoded = responses.encode(response);
        byte[] bytes = new byte[encoded.remaining()];
        encoded.get(bytes);
        String parent = request.get("parent_execution_id").toString();
        System.out.println("answered " + request.get("execution_id") + " for " + parent + ": "
                + outcome.get("value"));
        return new ProducerRecord<>(responsesTopic, parent, bytes);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: TaxService <bootstrap> <requests topic> <responses topic> <group id> <schemas dir>");
            System.exit(2);
        }
        // Only warnings from the Kafka client: the output is this service's answers.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        String bootstrap = args[0], requestsTopic = args[1], responsesTopic = args[2], group = args[3];
        TaxService service = new TaxService(new File(args[4]));

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group + "-" + UUID.randomUUID());
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");

        try (var consumer = new KafkaConsumer<>(c, new StringDeserializer(), new ByteArrayDeserializer());
             var producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            consumer.subscribe(List.of(requestsTopic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    if (!partitions.isEmpty()) {
                        System.out.println("ready " + partitions);
                    }
                }
            });
            while (true) {
                ConsumerRecords<String, byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                producer.beginTransaction();
                try {
                    for (ConsumerRecord<String, byte[]> record : records) {
                        // The `weir.kind` header names what a record is: a request has none
                        // (or `request`); with `cancel_notices = true` on the route, a
                        // cancellation (`cancel`) follows its request, and the parent no
                        // longer waits for the answer.
                        Header kind = record.headers().lastHeader("weir.kind");
                        String kindName = kind == null ? "request"
                                : new String(kind.value(), StandardCharsets.UTF_8);
                        if (kindName.equals("cancel")) {
                            System.out.println("cancelled " + record.key());
                        } else if (!kindName.equals("request")) {
                            System.err.println("skipping " + record.topic() + "/" + record.partition()
                                    + "@" + record.offset() + ": a record of kind " + kindName);
                        } else try {
                            producer.send(service.answer(record, responsesTopic));
                        } catch (KafkaException e) {
                            throw e;
                        } catch (Exception e) {
                            // Not a request we can read: say so and move on (a real service
                            // would forward it to a dead-letter topic).
                            System.err.println("skipping " + record.topic() + "/" + record.partition()
                                    + "@" + record.offset() + ": " + e);
                        }
                        offsets.put(new TopicPartition(record.topic(), record.partition()),
                                new OffsetAndMetadata(record.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                } catch (ProducerFencedException e) {
                    System.err.println("fenced by a newer instance: " + e);
                    return;
                } catch (KafkaException e) {
                    System.err.println("transaction aborted, re-reading from the committed offsets: " + e);
                    producer.abortTransaction();
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata committed = consumer.committed(java.util.Set.of(tp)).get(tp);
                        if (committed == null) {
                            consumer.seekToBeginning(List.of(tp));
                        } else {
                            consumer.seek(tp, committed.offset());
                        }
                    }
                }
            }
        }
    }
}
