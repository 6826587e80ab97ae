#!/bin/sh
# Start a data node or a Sentinel of the JuiceFS metadata engine at the current primary, with the programs of
# $ENGINE (redis or valkey: <engine>-server, <engine>-sentinel, <engine>-cli).
set -eu
REDISCLI_AUTH="$(cat "$CONFIG_DIR/password")"
export REDISCLI_AUTH

# The primary: what the Sentinels agree on, else a data node that has replicas, else the initial primary.
primary() {
  for s in $SENTINELS; do
    p="$(timeout 3 "$ENGINE-cli" -h "$s" -p "$SENTINEL_PORT" sentinel get-master-addr-by-name "$MASTER_NAME" \
      2>/dev/null | head -n 1)" || p=""
    if [ -n "$p" ]; then echo "$p"; return; fi
  done
  for n in $NODES; do
    [ "$n" = "$SELF_HOST" ] && continue
    info="$(timeout 3 "$ENGINE-cli" -h "$n" -p "$REDIS_PORT" info replication 2>/dev/null | tr -d '\r')" || info=""
    case "$info" in *role:master*connected_slaves:[1-9]*) echo "$n"; return ;; esac
  done
  echo "$INITIAL_PRIMARY"
}

role="$1"
shift
at="$(primary)"
echo "starting $role at $SELF_HOST; primary: $at"
if [ "$role" = sentinel ]; then
  conf="$DATA_DIR/sentinel.conf"
  sed "s/@PRIMARY@/$at/" "$CONFIG_DIR/sentinel.conf" > "$conf"
  echo "sentinel announce-ip $SELF_HOST" >> "$conf"
  exec "$ENGINE-sentinel" "$conf" "$@"
fi
conf="$DATA_DIR/redis-runtime.conf"
cp "$CONFIG_DIR/redis.conf" "$conf"
echo "replica-announce-ip $SELF_HOST" >> "$conf"
if [ "$at" != "$SELF_HOST" ]; then echo "replicaof $at $REDIS_PORT" >> "$conf"; fi
exec "$ENGINE-server" "$conf" "$@"
