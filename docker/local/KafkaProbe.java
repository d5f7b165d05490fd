// Readiness probe for the local stack's Kafka: a real metadata request through the Admin client
// (describe cluster + list topics), retried in one JVM until the deadline.
//   java -cp '<kafka lib>/*' KafkaProbe.java 127.0.0.1 9092 <timeout-seconds>
import java.util.Properties;

public class KafkaProbe {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]) * 1000;
        Exception last = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                System.out.println(ask(host, port));
                return;
            } catch (Exception e) {
                last = e;
                Thread.sleep(500);
            }
        }
        System.err.println("kafka at " + host + ":" + port + " did not answer: " + last);
        System.exit(1);
    }

    static String ask(String host, int port) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", host + ":" + port);
        props.put("request.timeout.ms", "2000");
        props.put("default.api.timeout.ms", "3000");
        try (var admin = org.apache.kafka.clients.admin.Admin.create(props)) {
            var nodes = admin.describeCluster().nodes().get();
            var topics = admin.listTopics().names().get();
            return "kafka ready: " + nodes.size() + " broker(s), " + topics.size() + " topic(s)";
        }
    }
}
