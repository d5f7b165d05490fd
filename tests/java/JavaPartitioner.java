// Prints, for every key read from stdin (one per line, UTF-8), the partition that the Java Kafka
// client's default partitioner picks for it: Utils.toPositive(Utils.murmur2(key)) % partitions.
// Used by the e2e tests to check Weir's and librdkafka's partitioning against the reference.
//   java -cp '<kafka lib>/*' JavaPartitioner.java <partitions> < keys.txt
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

public class JavaPartitioner {
    public static void main(String[] args) throws Exception {
        int partitions = Integer.parseInt(args[0]);
        var in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String key; (key = in.readLine()) != null; ) {
            byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
            System.out.println(Utils.toPositive(Utils.murmur2(bytes)) % partitions);
        }
    }
}
