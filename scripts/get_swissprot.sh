#!/usr/bin/env bash
# Fetches UniProtKB/Swiss-Prot as one gzip FASTA file, by one of two routes:
#
#   bash scripts/get_swissprot.sh OUT.fasta.gz            # current release, from UniProt
#   bash scripts/get_swissprot.sh OUT.fasta.gz --debian   # release 2014_01, offline on Debian
#
# --debian builds release 2014_01 from Debian's archive alone (no root needed):
# `apt-get download` fetches metastudent-data (three BLAST databases, BPO, MFO
# and CCO, of Swiss-Prot 2014_01 with GO labels) and ncbi-blast+ with the
# libraries blastdbcmd needs; `dpkg -x` unpacks them into a scratch folder;
# blastdbcmd dumps each database as FASTA; the union by accession is written
# (an accession in several databases has the same sequence in each). The
# databases' headers `>ACCESSION|GO:...` become `>ACCESSION GO:...`, so that
# the accession is the first word (what prepare-trembl and label-pfam key on). This is the route that produced results/ (see
# data/README.md for its checksum and counts).
#
# The output is written to OUT.partial and renamed when complete. Set
# SWISSPROT_WORK to keep the scratch folder (default: a temporary one).
set -euo pipefail

usage() { echo "usage: $0 OUT.fasta.gz [--debian]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "$1" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; -*) usage ;; esac
out=$1
route=${2:-download}
case "$route" in download|--download) route=download ;; --debian) route=debian ;; *) usage ;; esac
case "$out" in *.gz) ;; *) echo "error: OUT must end in .gz (the output is gzip FASTA), got $out" >&2; exit 2 ;; esac
if [ -s "$out" ] && gzip -t "$out" 2> /dev/null; then
  echo "$out exists; nothing to do (delete it to fetch again)"; exit 0
elif [ -e "$out" ]; then
  echo "error: $out exists but is not a complete gzip file; delete it and run again" >&2; exit 1
fi
mkdir -p "$(dirname "$out")"

if [ "$route" = download ]; then
  url=https://ftp.uniprot.org/pub/databases/uniprot/current_release/knowledgebase/complete/uniprot_sprot.fasta.gz
  echo "downloading $url"
  curl --fail --location --progress-bar --output "$out.partial" "$url"
  mv "$out.partial" "$out"
  echo "wrote $out"
  exit 0
fi

for tool in apt-get dpkg gzip awk; do
  command -v "$tool" > /dev/null || { echo "error: --debian needs $tool (a Debian or Ubuntu machine)" >&2; exit 1; }
done
work=${SWISSPROT_WORK:-$(mktemp -d)}
[ -n "${SWISSPROT_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
echo "apt-get download into $work/debs (about 240 MB)"
(cd "$work/debs" && apt-get download -q metastudent-data ncbi-blast+ liblmdb0 libmbedtls14 \
    libmbedcrypto7 libmbedx509-1 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done
blastdbcmd=$work/root/usr/bin/blastdbcmd
[ -x "$blastdbcmd" ] || { echo "error: apt-get download did not give ncbi-blast+ (is Debian's archive reachable?)" >&2; exit 1; }
export LD_LIBRARY_PATH="$work/root/usr/lib/ncbi-blast+:$work/root/usr/lib/x86_64-linux-gnu:$work/root/usr/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dbs=$work/root/usr/share/metastudent-data/dataset_201401
for ont in BPO MFO CCO; do
  echo "blastdbcmd $ont" >&2
  "$blastdbcmd" -db "$dbs/$ont/goasp.fasta" -entry all
done | awk '
  /^>/ { acc = substr($1, 2); sub(/\|.*/, "", acc); keep = !(acc in seen); seen[acc] = 1
         if (keep) { rest = substr($0, length(acc) + 3); print ">" acc (rest == "" ? "" : " " rest) }
         next }
  keep { print }
  END { printf "%d distinct accessions\n", length(seen) > "/dev/stderr" }' | gzip -n -6 > "$out.partial"
mv "$out.partial" "$out"
echo "wrote $out ($(du -h "$out" | cut -f1)); sha256 of its FASTA text (data/README.md lists it):" \
     "$(gzip -dc "$out" | sha256sum | cut -d" " -f1)"
