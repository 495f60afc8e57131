"""An independent check of Trellis's webhook signatures (tests/e2e_webhooks.rs).

Reads a JSON list of deliveries {secret, timestamp, signature, body_b64} from stdin and
verifies each the way a receiver written from the spec would: HMAC-SHA256 with the secret
over "{timestamp}.{rawBody}", hex, compared in constant time with the `sha256=` header value.
Prints "verified N" and exits 0 when every signature holds; exits 1 naming the first that
does not.
"""

import base64
import hashlib
import hmac
import json
import sys


def main() -> int:
    deliveries = json.load(sys.stdin)
    if not deliveries:
        print("no deliveries to verify", file=sys.stderr)
        return 1
    for index, delivery in enumerate(deliveries):
        body = base64.b64decode(delivery["body_b64"])
        signed = delivery["timestamp"].encode() + b"." + body
        expected = hmac.new(delivery["secret"].encode(), signed, hashlib.sha256).hexdigest()
        header = delivery["signature"]
        if not header.startswith("sha256="):
            print(f"delivery {index}: the signature has no sha256= prefix", file=sys.stderr)
            return 1
        if not hmac.compare_digest(expected, header[len("sha256="):]):
            print(f"delivery {index}: the signature does not match", file=sys.stderr)
            return 1
    print(f"verified {len(deliveries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
