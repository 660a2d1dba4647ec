#!/usr/bin/env perl
# One-off: rewrites citations of the design notes outside the repository ("seed step 4",
# "conformance 16") into citations of docs/protocol.md ("protocol.md K4", "protocol.md H16").
# Usage (whole files, so phrases broken across comment lines match too):
#   git ls-files 'src/*.ts' 'test/*.ts' 'examples/*.ts' 'bench/*.ts' | xargs perl -0777 -pi scripts/rewrite-citations.pl
# then check: git grep -nE 'seed(,|:| step| statement|.s )|conformance [0-9]' -- src test examples bench
# Specific phrases first, then the numbered forms.
my $c = qr/\s*(?:\*|\/\/)?\s*/;    # a line break inside a comment: newline, indent, * or //

# seed: named sections and pitfalls
s/seed step 1 and its pitfalls "new key per retry" and "app restart"; conformance 21-22/protocol.md K1, H21-H22/g;
s/seed steps 3 and "Decision${c}logic"/protocol.md K3/g;
s/seed step 4(?:,|:) "`<key>:authorize`"/protocol.md K11/g;
s/seed step 4, "0 rows: we lost the lease, roll back"/protocol.md K8/g;
s/seed step 3, state='done'/protocol.md K3/g;
s/seed, "What${c}gets${c}stored"/protocol.md K10/g;
s/seed, "Decision${c}logic"/protocol.md K3/g;
s/seed, "Not${c}propagating${c}idempotency${c}downstream"/protocol.md K11/g;
s/seed, pitfall "retention${c}shorter${c}than${c}the${c}client's${c}retry${c}horizon"/protocol.md H22/g;
s/seed, table `idempotency_keys\.state`/column `state`; the state machine in protocol.md/g;
s/seed, "Code"/protocol.md Q1-Q6/g;
s/seed: "partition by created_at, drop whole partitions"/protocol.md K16/g;
s/exactly the seed's `decide`/exactly the decision table of protocol.md K3/g;
s/the seed's name/the name protocol.md uses/g;
s/Columns follow the seed, with these choices/Columns follow protocol.md Q1-Q6, with these choices/g;
s/\. The seed's claim uses `now\(\) \+ interval '60 seconds'`;/ (protocol.md K7);/g;
s/the seed suggests 24 h to 7 d/24 h to 7 d are common (protocol.md K6)/g;
s/\(seed: `CHECK \(length\(key\) BETWEEN 1 AND 255\)`\)/(protocol.md H5)/g;
s/the existing row \(statement 2\)/the existing row (protocol.md Q2)/g;

# seed: numbered forms
s/seed steps (\d)-(\d)/protocol.md K$1-K$2/g;
s/seed step (\d)/protocol.md K$1/g;
s/seed statements (\d)-(\d)/protocol.md Q$1-Q$2/g;
s/seed statement (\d)/protocol.md Q$1/g;

# conformance list
s/conformance${c}(\d+)-(\d+)/protocol.md H$1-H$2/g;
s/conformance${c}(\d+)/protocol.md H$1/g;
