// Prints, for every .avsc file given, the CRC-64-AVRO fingerprint of its Parsing Canonical Form
// as Apache Avro (Java, the reference implementation) computes it: `<file> <hex of the u64>`.
// The single-object header carries this fingerprint; the tests compare it with Weir's.
//   java -cp '<external-activity lib>/*' AvroFingerprints.java <file.avsc>...
import java.io.File;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;

public class AvroFingerprints {
    public static void main(String[] args) throws Exception {
        for (String file : args) {
            Schema schema = new Schema.Parser().parse(new File(file));
            long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
            System.out.println(file + " " + Long.toHexString(fingerprint));
        }
    }
}
