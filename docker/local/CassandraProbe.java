// Readiness probe for the local stack's Cassandra: a CQL query on system.local through the Java
// driver that ships with cassandra-all, retried in one JVM until the deadline.
//   java -cp '<cassandra lib>/*' CassandraProbe.java 127.0.0.1 9042 <timeout-seconds>
public class CassandraProbe {
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
        System.err.println("cassandra at " + host + ":" + port + " did not answer: " + last);
        System.exit(1);
    }

    static String ask(String host, int port) {
        try (var cluster = com.datastax.driver.core.Cluster.builder()
                .addContactPoint(host).withPort(port).withoutJMXReporting().build();
             var session = cluster.connect()) {
            var row = session.execute("SELECT release_version FROM system.local").one();
            return "cassandra ready: release " + row.getString(0);
        }
    }
}
