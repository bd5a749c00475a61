#!/usr/bin/env bash
# etcd over TLS with client certificates (made here with openssl: a CA, a
# server certificate for 127.0.0.1, a client certificate): the etcd client
# passes its whole check over https, ddprun runs a job with --rdzv-conf
# cacert=,cert=,key=, and without a client certificate ddprun is refused
# with a message naming etcd.
# timeout: 60
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"
command -v openssl > /dev/null || skip "skipped: openssl is not installed"
command -v etcd > /dev/null || skip "skipped: etcd is not installed (Debian's etcd-server)"
pki=$TMP/pki
mkdir -p "$pki"
(
    cd "$pki" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
    for who in server client; do
        openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout "$who.key" -out "$who.csr"
        openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile ext.cnf -out "$who.pem"
    done
) > "$TMP/openssl.log" 2>&1 || { cat "$TMP/openssl.log"; die "cannot make the certificates"; }
cport=$(free_port)
pport=$(free_port)
etcd --name t --data-dir "$TMP/etcd" \
    --listen-client-urls "https://127.0.0.1:$cport" --advertise-client-urls "https://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "t=http://127.0.0.1:$pport" --cert-file "$pki/server.pem" \
    --key-file "$pki/server.key" --trusted-ca-file "$pki/ca.pem" --client-cert-auth \
    > "$TMP/etcd.log" 2>&1 &
PIDS+=($!)
ep=127.0.0.1:$cport
tls=(--cacert "$pki/ca.pem" --cert "$pki/client.pem" --key "$pki/client.key")
wait_for 20 "etcd over TLS" "$ROOT/build/tests/etcd-check" "$ep" "${tls[@]}"
"$ROOT/build/tests/etcd-check" "$ep" "${tls[@]}" > "$TMP/check.out" 2>&1 ||
    { cat "$TMP/check.out"; die "the client over TLS"; }
start_ddprun ok --nnodes=1 --rdzv-backend=etcd-v3 --rdzv-endpoint="$ep" \
    --rdzv-conf="cacert=$pki/ca.pem,cert=$pki/client.pem,key=$pki/client.key" --no-python true
wait_exit 20 "$LAST_PID"
assert_rc ok 0
start_ddprun nocert --nnodes=1 --rdzv-backend=etcd-v3 --rdzv-endpoint="$ep" \
    --rdzv-conf="cacert=$pki/ca.pem,read_timeout=8" --no-python true
wait_exit 30 "$LAST_PID"
assert_rc nocert 1
assert_grep "$TMP/nocert.err" "cannot use etcd at $ep for the rendezvous: .*give cert= and key=" \
    "the refusal without a certificate, with the hint"
echo "etcd over TLS with client certificates: client, ddprun, and the refusal without one"
