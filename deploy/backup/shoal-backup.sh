#!/bin/sh
# A backup of a shoal deployment, for deploy/systemd/shoal-backup.service (daily, by its timer)
# or by hand: the database (MongoDB: mongodump of shoal's database; SQLite: `shoal backup`, an
# online snapshot), the net directory (nets never change once added: only new ones are
# copied) and the generated cookie secret if there is one. Old database copies are pruned.
#
# Settings (environment): SHOAL_CONFIG (/etc/shoal/settings.toml), SHOAL_BIN
# (/usr/local/bin/shoal), SHOAL_BACKUP_DIR (/var/backups/shoal), SHOAL_BACKUP_KEEP_DAYS (14),
# and whatever SHOAL_* the instances get (SHOAL_MONGODB_URI with its password,
# SHOAL_DATA_DIR of the SQLite instance).
set -eu

CONFIG="${SHOAL_CONFIG:-/etc/shoal/settings.toml}"
SHOAL="${SHOAL_BIN:-/usr/local/bin/shoal}"
DEST="${SHOAL_BACKUP_DIR:-/var/backups/shoal}"
KEEP_DAYS="${SHOAL_BACKUP_KEEP_DAYS:-14}"
STAMP="$(date -u +%Y-%m-%dT%H%M%SZ)"

say() { echo "shoal-backup: $*" >&2; }

# The effective settings, as the instances see them (settings file + SHOAL_* environment).
EFFECTIVE="$("$SHOAL" check-config --config "$CONFIG")"
setting() {
    printf '%s\n' "$EFFECTIVE" | sed -n "s/^$1 *= *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" | head -n1
}
STORE="$(setting store)"
DATA_DIR="$(setting data_dir)"
NN_DIR="$(setting nn_dir)"
[ -n "$NN_DIR" ] || NN_DIR="$DATA_DIR/nn"

umask 077
mkdir -p "$DEST"
case "$STORE" in
mongodb)
    # check-config hides a password in the URI: take it from the environment when set.
    URI="${SHOAL_MONGODB_URI:-$(setting mongodb_uri)}"
    command -v mongodump >/dev/null 2>&1 || {
        say "mongodump is missing (MongoDB's database tools)"
        exit 1
    }
    OUT="$DEST/shoal-$STAMP.archive.gz"
    mongodump --quiet --uri="$URI" --gzip --archive="$OUT.part"
    mv "$OUT.part" "$OUT"
    ;;
sqlite)
    OUT="$DEST/shoal-$STAMP.db"
    "$SHOAL" backup --config "$CONFIG" "$OUT"
    ;;
*)
    say "unknown store '$STORE' in $CONFIG"
    exit 1
    ;;
esac
say "database: $OUT ($(wc -c <"$OUT") bytes)"

if [ -d "$NN_DIR" ]; then
    mkdir -p "$DEST/nn"
    # Nets are immutable: copy the new ones only (not `cp -n`, which exits 1 on newer
    # coreutils when it skips a file). nn_dir is flat.
    for f in "$NN_DIR"/*; do
        [ -f "$f" ] || continue
        name="$(basename "$f")"
        if [ ! -e "$DEST/nn/$name" ]; then
            cp -p "$f" "$DEST/nn/$name.part" && mv "$DEST/nn/$name.part" "$DEST/nn/$name"
        fi
    done
    say "nets: $(find "$DEST/nn" -type f | wc -l) file(s) in $DEST/nn"
fi
if [ -f "$DATA_DIR/secret" ]; then
    cp -a "$DATA_DIR/secret" "$DEST/secret"
fi

find "$DEST" -maxdepth 1 -type f -name 'shoal-*' -mtime +"$KEEP_DAYS" -print -delete |
    sed 's/^/shoal-backup: pruned /' >&2
