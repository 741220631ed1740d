#!/usr/bin/env bash
# End-to-end check of gpudev's Kubernetes objects against a real cluster.
#
# What it needs: `kubectl` on PATH and a cluster that KUBECONFIG (or ~/.kube/config) points at
# (kind, k3s, a cloud cluster) where this user may create namespaces; an image the cluster can
# pull that has python3, tar and find, with a folder its user 1000 may write (E2E_IMAGE, default
# quay.io/jupyter/minimal-notebook, whose /opt/conda is user 1000's; E2E_WRITABLE names the
# folder, default /opt/conda); for GPUs, E2E_GPUS=N and the NVIDIA device plugin; for a push,
# E2E_REGISTRY=HOST[:PORT]/REPO that the cluster reaches and this server's Docker credentials
# (or c.Registries.credentials) log in to; E2E_BUILD_EGRESS, the build pod's allowed egress
# (the host's build_egress, JSON; default: anywhere); E2E_NETPOL=1 where the cluster's network
# plugin enforces NetworkPolicies (Calico, Cilium, ...), to check who reaches a dev pod. Without
# kubectl or a reachable cluster it says so and exits 0. It has never run against a cluster.
#
# What it does:
#   1. a namespace enforcing the "restricted" Pod Security Standard;
#   2. gpudev's RBAC for it, applied;
#   3. `jupyter gpudev start e2e --host=cluster --dry-run` for an environment of E2E_IMAGE,
#      validated by the API server (`kubectl apply --dry-run=server`), then applied; its
#      NetworkPolicy selects the pod and admits gpudev's server only;
#   4. waits for the pod to be Ready (the scheduler's events printed when it is not), then
#      checks in it: the user is 1000, no service account token is mounted, the workspace claim
#      is writable, python3 runs; with E2E_GPUS, nvidia-smi lists that many GPUs; with
#      E2E_NETPOL, a pod labelled as gpudev's server reaches a port of it, another pod does not;
#   5. deletes the pod and checks that the workspace claim stays;
#   6. gpudev's own start of the same environment (the objects created, the pod waited for,
#      the postCreateCommand run by exec; its NetworkPolicy owned by the pod, gone with it),
#      `ls`, `logs`; `rm` of the unchanged pod without --force; a second start, a file written
#      outside the workspace by kubectl exec, `rm` refused without --force; `diff` names the
#      change, `commit --write` writes the Dockerfile, after which `rm` needs no --force; with
#      E2E_REGISTRY, `commit --snapshot --push` (a kaniko Job in the cluster) and the pushed
#      image's digest, the build's Job, Secret and NetworkPolicy gone after it, and a build
#      whose context the pod keeps rewriting in its claim refused; deletes the namespace.
# Still to come: a kernel, a terminal, a proxied port (they need a running Jupyter server).
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "k8s-e2e: skipped: $*"
    exit 0
}

command -v kubectl >/dev/null 2>&1 || skip "no kubectl on PATH (install it and point KUBECONFIG at a cluster)"
kubectl version --request-timeout=10s >/dev/null 2>&1 ||
    skip "no cluster answers (KUBECONFIG=${KUBECONFIG:-~/.kube/config})"
JUPYTER=${JUPYTER:-.venv/bin/jupyter}
[ -x "$JUPYTER" ] || skip "no $JUPYTER: run scripts/setup.sh first"

IMAGE=${E2E_IMAGE:-quay.io/jupyter/minimal-notebook}
WRITABLE=${E2E_WRITABLE:-/opt/conda}
GPUS=${E2E_GPUS:-0}
NS="gpudev-e2e-$(date +%s)"
EGRESS=${E2E_BUILD_EGRESS:-'[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]'}
HOSTS="{\"cluster\": {\"url\": \"k8s:///$NS\", \"build_egress\": $EGRESS}}"
WORK=$(mktemp -d)
cleanup() {
    kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

step() { echo "==> $*"; }
fail() {
    echo "k8s-e2e: FAILED: $*" >&2
    kubectl -n "$NS" get events --sort-by=.lastTimestamp >&2 || true
    exit 1
}

step "namespace $NS (Pod Security: restricted, or baseline with E2E_REGISTRY)"
kubectl create namespace "$NS"
# Builds (E2E_REGISTRY) run kaniko as root in their own pod: that needs the "baseline" level.
kubectl label namespace "$NS" \
    pod-security.kubernetes.io/enforce="$([ -n "${E2E_REGISTRY:-}" ] && echo baseline || echo restricted)"

step "gpudev's RBAC"
"$JUPYTER" gpudev hosts rbac "$NS" | kubectl apply -f -

step "the dev container's objects"
mkdir -p "$WORK/.devcontainer/e2e"
printf '{"name": "e2e", "image": "%s", "workspaceFolder": "/workspace", "forwardPorts": [8888], "postCreateCommand": "echo created > /tmp/e2e-created"}\n' "$IMAGE" \
    >"$WORK/.devcontainer/e2e/devcontainer.json"
"$JUPYTER" gpudev start e2e --host=cluster --name=e2e --gpus="$GPUS" --dry-run \
    --root-dir="$WORK" "--HostPool.hosts=$HOSTS" >"$WORK/objects.json"
kubectl apply --dry-run=server -f "$WORK/objects.json" || fail "the API server refused the objects"
kubectl apply -f "$WORK/objects.json"
[ "$(kubectl -n "$NS" get networkpolicy gpudev-e2e -o jsonpath='{.spec.policyTypes}')" = '["Ingress"]' ] ||
    fail "the dev pod has no ingress NetworkPolicy"
kubectl -n "$NS" get networkpolicy gpudev-e2e -o jsonpath='{.spec.ingress[0].from[0].podSelector.matchLabels}' |
    grep -q '"gpudev.jupyter.org/role":"server"' || fail "the NetworkPolicy does not admit gpudev's server"

step "waiting for the pod"
POD=gpudev-e2e
kubectl -n "$NS" wait "pod/$POD" --for=condition=Ready --timeout=300s ||
    fail "the pod did not become Ready"

step "inside the pod"
[ "$(kubectl -n "$NS" exec "$POD" -- id -u)" = 1000 ] || fail "not running as user 1000"
if kubectl -n "$NS" exec "$POD" -- test -e /var/run/secrets/kubernetes.io/serviceaccount/token; then
    fail "a service account token is mounted"
fi
kubectl -n "$NS" exec "$POD" -- sh -c 'echo kept > /workspace/e2e.txt' || fail "the workspace is not writable"
kubectl -n "$NS" exec "$POD" -- python3 -c 'print("python ok")'
if [ "$GPUS" -gt 0 ]; then
    seen=$(kubectl -n "$NS" exec "$POD" -- nvidia-smi -L | grep -c '^GPU ')
    [ "$seen" = "$GPUS" ] || fail "nvidia-smi lists $seen GPUs, $GPUS asked"
fi

probe() { # NAME LABEL VALUE: whether a pod so labelled reaches port 8888 of the dev pod
    kubectl -n "$NS" apply -f - >/dev/null <<PROBE
apiVersion: v1
kind: Pod
metadata: {name: "probe-$1", labels: {"$2": "$3"}}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: probe
      image: "$IMAGE"
      command: [python3, -c, "import urllib.request; urllib.request.urlopen('http://$IP:8888/', timeout=10)"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
PROBE
    local phase=""
    for _ in $(seq 90); do
        phase=$(kubectl -n "$NS" get pod "probe-$1" -o jsonpath='{.status.phase}')
        if [ "$phase" = Succeeded ] || [ "$phase" = Failed ]; then break; fi
        sleep 1
    done
    [ "$phase" = Succeeded ]
}
if [ "${E2E_NETPOL:-0}" = 1 ]; then
    step "only gpudev's server reaches the pod (the network plugin enforces NetworkPolicies)"
    kubectl -n "$NS" exec "$POD" -- sh -c 'nohup python3 -m http.server 8888 >/dev/null 2>&1 &'
    IP=$(kubectl -n "$NS" get pod "$POD" -o jsonpath='{.status.podIP}')
    probe stranger app stranger && fail "a pod not labelled as gpudev's server reached the dev pod"
    probe server gpudev.jupyter.org/role server || fail "gpudev's server could not reach the dev pod"
fi

step "the pod goes, the workspace claim stays"
kubectl -n "$NS" delete pod "$POD" --wait=true
kubectl -n "$NS" get pvc gpudev-ws-e2e >/dev/null || fail "the workspace claim went with the pod"

gpudev() {
    "$JUPYTER" gpudev "$@" --root-dir="$WORK" "--HostPool.hosts=$HOSTS" \
        "--DevContainers.state_dir=$WORK/state"
}

step "gpudev's own start, ls, logs, rm"
gpudev start e2e --host=cluster --name=own --gpus="$GPUS" --json >"$WORK/own.json" ||
    fail "gpudev could not start the pod"
grep -q '"state": "running"' "$WORK/own.json" || fail "the started pod is not running"
[ "$(kubectl -n "$NS" exec gpudev-own -- cat /tmp/e2e-created)" = created ] ||
    fail "the postCreateCommand did not run"
OWNER='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}'
[ "$(kubectl -n "$NS" get networkpolicy gpudev-own -o jsonpath="$OWNER")" = Pod/gpudev-own ] ||
    fail "the dev pod's NetworkPolicy is not owned by its pod"
gpudev ls --host=cluster | grep -q '^own ' || fail "ls does not list the pod"
gpudev logs own --host=cluster >/dev/null || fail "logs failed"
gpudev rm own --host=cluster || fail "an unchanged pod was not removed without --force"
kubectl -n "$NS" get pod gpudev-own >/dev/null 2>&1 && fail "the pod is still there"
for _ in $(seq 60); do # the garbage collector deletes the policy once the pod is gone
    kubectl -n "$NS" get networkpolicy gpudev-own >/dev/null 2>&1 || break
    sleep 1
done
kubectl -n "$NS" get networkpolicy gpudev-own >/dev/null 2>&1 && fail "the NetworkPolicy outlived its pod"

step "a changed pod: rm refused, diff, commit, then rm"
gpudev start e2e --host=cluster --name=own --gpus="$GPUS" --json >/dev/null || fail "second start"
CHANGE="$WRITABLE/e2e-change.txt"
kubectl -n "$NS" exec gpudev-own -- sh -c "echo changed > '$CHANGE'"
if gpudev rm own --host=cluster 2>"$WORK/rm.err"; then fail "a changed pod was removed without --force"; fi
grep -q "$CHANGE" "$WORK/rm.err" || fail "rm did not name the change"
gpudev diff own --host=cluster >"$WORK/diff.txt" || fail "diff failed"
grep -q "e2e-change.txt" "$WORK/diff.txt" || fail "the diff does not have the change"
if [ -n "${E2E_REGISTRY:-}" ]; then
    gpudev commit own --host=cluster --snapshot "$E2E_REGISTRY:e2e-$NS" --push \
        2>"$WORK/push.err" || { cat "$WORK/push.err" >&2; fail "the snapshot was not pushed"; }
    grep -q "pushed sha256:" "$WORK/push.err" || fail "the push said no digest"
    kubectl -n "$NS" get jobs,secrets,networkpolicies -l gpudev.jupyter.org/role=build -o name |
        grep -q . && fail "the build Job, Secret or NetworkPolicy was left behind"
    step "a build context the pod rewrites in its claim is refused"
    (while sleep 0.2; do
        kubectl -n "$NS" exec gpudev-own -- sh -c \
            'for f in /workspace/.gpudev-build/*/context.tar; do [ -f "$f" ] && printf x >"$f"; done' \
            >/dev/null 2>&1 || true
    done) &
    REWRITER=$!
    if gpudev commit own --host=cluster --snapshot "$E2E_REGISTRY:e2e-rewritten-$NS" --push \
        2>"$WORK/rewritten.err"; then
        kill "$REWRITER"
        fail "a build context the pod rewrote was built and pushed"
    fi
    kill "$REWRITER"
    grep -q "changed in the pod's workspace claim" "$WORK/rewritten.err" ||
        { cat "$WORK/rewritten.err" >&2; fail "the refusal did not say why"; }
fi
gpudev commit own --host=cluster --write || fail "commit --write failed"
[ -f "$WORK/.devcontainer/e2e/Dockerfile" ] || fail "no Dockerfile was written"
gpudev rm own --host=cluster || fail "a committed pod was not removed without --force"
kubectl -n "$NS" get pvc gpudev-ws-own >/dev/null || fail "the workspace claim went with the pod"

echo "k8s-e2e: passed"
