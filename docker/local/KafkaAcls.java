// Kafka ACLs through the Admin client, for docker/local/kafka-acls.sh (which holds the table of
// what each role gets). Connects over SASL_SSL with SCRAM-SHA-512, trusting the CA of CA_PEM
// (and checking the broker's name against its certificate).
//   java -cp '<kafka lib>/*' KafkaAcls.java BOOTSTRAP CA_PEM USER PASSWORD list
//   java -cp '<kafka lib>/*' KafkaAcls.java BOOTSTRAP CA_PEM USER PASSWORD grant|revoke PRINCIPAL SPEC...
// SPEC is RESOURCE_TYPE:PATTERN_TYPE:OPERATION[,OPERATION...]:NAME, e.g. Topic:PREFIXED:READ,WRITE:t1.
// Every ACL is ALLOW from any host. Granting an ACL that exists is a no-op (Kafka keeps one).
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcls {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) usage();
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("security.protocol", "SASL_SSL");
        props.put("ssl.truststore.type", "PEM");
        props.put("ssl.truststore.location", args[1]);
        props.put("sasl.mechanism", "SCRAM-SHA-512");
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required"
                + " username=\"" + args[2] + "\" password=\"" + args[3] + "\";");
        props.put("request.timeout.ms", "10000");
        props.put("default.api.timeout.ms", "20000");
        try (var admin = Admin.create(props)) {
            switch (args[4]) {
                case "list" -> list(admin);
                case "grant", "revoke" -> {
                    if (args.length < 7) usage();
                    List<AclBinding> acls = new ArrayList<>();
                    for (int i = 6; i < args.length; i++) acls.addAll(bindings(args[5], args[i]));
                    if (args[4].equals("grant")) {
                        admin.createAcls(acls).all().get();
                    } else {
                        admin.deleteAcls(acls.stream().map(AclBinding::toFilter).toList()).all().get();
                    }
                    for (var acl : acls) System.out.println(args[4] + " " + show(acl));
                }
                default -> usage();
            }
        }
    }

    static List<AclBinding> bindings(String principal, String spec) {
        String[] part = spec.split(":", 4);
        if (part.length != 4) throw new IllegalArgumentException("not TYPE:PATTERN:OPS:NAME: " + spec);
        // Topic -> TOPIC, TransactionalId -> TRANSACTIONAL_ID
        var type = ResourceType.fromString(part[0].replaceAll("(?<=[a-z])(?=[A-Z])", "_"));
        var pattern = PatternType.fromString(part[1]);
        if (type == ResourceType.UNKNOWN || pattern == PatternType.UNKNOWN || part[3].isEmpty())
            throw new IllegalArgumentException("bad resource in " + spec);
        List<AclBinding> out = new ArrayList<>();
        for (String op : part[2].split(",")) {
            var operation = AclOperation.fromString(op);
            if (operation == AclOperation.UNKNOWN) throw new IllegalArgumentException("bad operation " + op);
            out.add(new AclBinding(new ResourcePattern(type, part[3], pattern),
                    new AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW)));
        }
        return out;
    }

    static void list(Admin admin) throws Exception {
        var acls = new ArrayList<>(admin.describeAcls(AclBindingFilter.ANY).values().get());
        acls.sort(Comparator.comparing((AclBinding b) -> b.entry().principal())
                .thenComparing(b -> b.pattern().resourceType())
                .thenComparing(b -> b.pattern().name())
                .thenComparing(b -> b.pattern().patternType())
                .thenComparing(b -> b.entry().operation()));
        for (var acl : acls) System.out.println(show(acl));
        System.err.println(acls.size() + " ACL(s)");
    }

    static String show(AclBinding acl) {
        var p = acl.pattern();
        var e = acl.entry();
        return String.format("%-20s %-5s %-16s %s:%s:%s host=%s", e.principal(), e.permissionType(),
                e.operation(), p.resourceType(), p.patternType(), p.name(), e.host());
    }

    static void usage() {
        System.err.println("usage: KafkaAcls BOOTSTRAP CA_PEM USER PASSWORD list | grant|revoke PRINCIPAL SPEC...");
        System.exit(2);
    }
}
