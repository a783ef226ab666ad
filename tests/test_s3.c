/* The S3 client's parsers, against answers in the shapes AWS documents and
 * radosgw sends: SigV4 percent-encoding, the AWS INI files, S3 error bodies,
 * InitiateMultipartUpload and ListObjectsV2 pages (and what each refuses),
 * and s3:// URIs. The client's requests themselves are tested against a
 * real server in cli_s3.sh. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "s3/s3.h"
#include "testutil.h"

static void test_encode(void) {
    char *e = anvil_s3_encode("a b/ü~_-.x+%?&=", 1);
    CHECK(e && !strcmp(e, "a%20b/%C3%BC~_-.x%2B%25%3F%26%3D"));
    free(e);
    e = anvil_s3_encode("data/part 1", 0);
    CHECK(e && !strcmp(e, "data%2Fpart%201"));
    free(e);
    e = anvil_s3_encode("", 0);
    CHECK(e && !strcmp(e, ""));
    free(e);
}

static void test_ini(void) {
    const char *t = "# comment\n[default]\naws_access_key_id = AKDEF\n"
                    "[profile dev]\n  region=eu-west-1  \n; aws_secret_access_key = no\n"
                    "[dev]\naws_access_key_id=AKDEV\naws_secret_access_key = s3cr=t\r\n[last]\nkey";
    char v[64];
    size_t n = strlen(t);
    CHECK(anvil_s3_ini_get(t, n, "default", "aws_access_key_id", v, sizeof v) == 1 && !strcmp(v, "AKDEF"));
    CHECK(anvil_s3_ini_get(t, n, "dev", "aws_access_key_id", v, sizeof v) == 1 && !strcmp(v, "AKDEV"));
    /* Only the first '=' splits; the CR of a Windows line ending is not part of the value. */
    CHECK(anvil_s3_ini_get(t, n, "dev", "aws_secret_access_key", v, sizeof v) == 1 && !strcmp(v, "s3cr=t"));
    CHECK(anvil_s3_ini_get(t, n, "profile dev", "region", v, sizeof v) == 1 && !strcmp(v, "eu-west-1"));
    CHECK(anvil_s3_ini_get(t, n, "profile dev", "aws_secret_access_key", v, sizeof v) == 0);
    CHECK(anvil_s3_ini_get(t, n, "default", "region", v, sizeof v) == 0);
    CHECK(anvil_s3_ini_get(t, n, "last", "key", v, sizeof v) == 0);
    CHECK(anvil_s3_ini_get(t, n, "dev", "aws_access_key_id", v, 3) == 1 && !strcmp(v, "AK"));
}

static void test_error(void) {
    const char *x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>"
                    "<Message>The request signature we calculated does not match</Message>"
                    "<StringToSign>AWS4-HMAC-SHA256</StringToSign><RequestId>tx0</RequestId></Error>";
    char code[64], msg[128];
    CHECK(anvil_s3_parse_error(x, strlen(x), code, sizeof code, msg, sizeof msg) == 0);
    CHECK(!strcmp(code, "SignatureDoesNotMatch") && !strncmp(msg, "The request signature", 21));
    const char *nocode = "<Error><Message>m</Message></Error>";
    CHECK(anvil_s3_parse_error(nocode, strlen(nocode), code, sizeof code, msg, sizeof msg) != 0);
    CHECK(anvil_s3_parse_error("<Error><Code>x", 14, code, sizeof code, msg, sizeof msg) != 0);
    CHECK(anvil_s3_parse_error("", 0, code, sizeof code, msg, sizeof msg) != 0);
}

static void test_upload_id(void) {
    const char *x = "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                    "<Bucket>b</Bucket><Key>k</Key><UploadId>2~abc&amp;def</UploadId></InitiateMultipartUploadResult>";
    char *id = NULL;
    CHECK(anvil_s3_parse_upload_id(x, strlen(x), &id) == 0 && id && !strcmp(id, "2~abc&def"));
    free(id);
    const char *none = "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>";
    CHECK(anvil_s3_parse_upload_id(none, strlen(none), &id) != 0 && !id && strstr(anvil_errmsg(), "no "));
    const char *two = "<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId>"
                      "</InitiateMultipartUploadResult>";
    CHECK(anvil_s3_parse_upload_id(two, strlen(two), &id) != 0 && !id);
}

static void test_list(void) {
    const char *x =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><Prefix>d/</Prefix>"
        "<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
        "<Contents><Key>d/a b&amp;c</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        "<ETag>&quot;x&quot;</ETag><Size>17179869184</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>d/\xc3\xbc</Key><Size>0</Size></Contents>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        "</ListBucketResult>";
    anvil_s3_list_page pg;
    CHECK(anvil_s3_parse_list(x, strlen(x), &pg) == 0);
    CHECK(pg.n == 2 && pg.truncated && pg.next_token && !strcmp(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="));
    CHECK(pg.n == 2 && !strcmp(pg.objects[0].key, "d/a b&c") && pg.objects[0].size == 17179869184ull);
    CHECK(pg.n == 2 && !strcmp(pg.objects[1].key, "d/\xc3\xbc") && pg.objects[1].size == 0);
    anvil_s3_list_page_free(&pg);

    const char *last = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
    CHECK(anvil_s3_parse_list(last, strlen(last), &pg) == 0 && pg.n == 0 && !pg.truncated && !pg.next_token);
    anvil_s3_list_page_free(&pg);

    static const char *const refused[] = {
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999999</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents>",
        "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents></ListBucketResult><x/>",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        anvil_fail("%s", "");
        CHECK(anvil_s3_parse_list(refused[i], strlen(refused[i]), &pg) != 0 && anvil_errmsg()[0]);
        CHECK(pg.n == 0 && !pg.objects && !pg.next_token);
    }
    /* Text past the 4096-byte element limit (S3 keys are at most 1024 bytes) is refused. */
    size_t big = 6000;
    char *huge = malloc(big + 128);
    strcpy(huge, "<ListBucketResult><Contents><Key>");
    memset(huge + strlen(huge), 'k', big);
    strcpy(huge + 33 + big, "</Key></Contents></ListBucketResult>");
    CHECK(anvil_s3_parse_list(huge, strlen(huge), &pg) != 0 && strstr(anvil_errmsg(), "longer than"));
    free(huge);
}

static void test_uri(void) {
    char *b, *k;
    CHECK(anvil_s3_parse_uri("s3://my-bucket/a/b c", &b, &k) == 0 && !strcmp(b, "my-bucket") && !strcmp(k, "a/b c"));
    free(b);
    free(k);
    CHECK(anvil_s3_parse_uri("s3://bkt", &b, &k) == 0 && !strcmp(b, "bkt") && !strcmp(k, ""));
    free(b);
    free(k);
    CHECK(anvil_s3_parse_uri("s3://ab/k", &b, &k) != 0 && !b && !k);
    CHECK(anvil_s3_parse_uri("s3://Upper/k", &b, &k) != 0 && strstr(anvil_errmsg(), "a-z"));
    CHECK(anvil_s3_parse_uri("/local/path", &b, &k) != 0);
    CHECK(anvil_s3_is_uri("s3://x") && !anvil_s3_is_uri("s3:/x") && !anvil_s3_is_uri(NULL));
}

int main(void) {
    test_encode();
    test_ini();
    test_error();
    test_upload_id();
    test_list();
    test_uri();
    return t_done("test_s3");
}
