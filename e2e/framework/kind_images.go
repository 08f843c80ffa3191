package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// CheckDocker says plainly why the kind provider cannot run here: no docker
// CLI, or no Docker daemon behind it.
func CheckDocker(ctx context.Context) error {
	path, err := exec.LookPath("docker")
	if err != nil {
		return errors.New("docker is not available: the docker CLI is not installed (not found in $PATH); the kind provider needs Docker; nothing was run")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil {
		host := os.Getenv("DOCKER_HOST")
		if host == "" {
			host = "unix:///var/run/docker.sock"
		}
		return fmt.Errorf("docker is not available: 'docker info' cannot reach a daemon at %s (%v: %s); the kind provider needs Docker; nothing was run",
			host, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// dockerArch is the daemon's architecture in GOARCH spelling.
func dockerArch(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Arch}}").Output()
	if err != nil {
		return "", fmt.Errorf("docker version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildImages builds the proxy image from the repository's Dockerfile (as
// `make docker-build` does) and the DriftReport sink's image from a static
// binary built on this machine.
func (k *Kind) buildImages(ctx context.Context) error {
	if err := k.run(ctx, k.repo, []string{"DOCKER_BUILDKIT=1"}, "docker", "build", "-t", KindProxyImage, "."); err != nil {
		return err
	}
	arch, err := dockerArch(ctx)
	if err != nil {
		return err
	}
	sinkDir := filepath.Join(k.WorkDir, "reportsink")
	if err := os.MkdirAll(sinkDir, 0o755); err != nil {
		return err
	}
	if err := k.run(ctx, k.repo, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
		"go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(sinkDir, "reportsink"), "./e2e/reportsink"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(sinkDir, "Dockerfile"), []byte(reportSinkDockerfile), 0o644); err != nil {
		return err
	}
	return k.run(ctx, sinkDir, []string{"DOCKER_BUILDKIT=1"}, "docker", "build", "-t", KindReportSinkImage, ".")
}

// reportSinkDockerfile needs no base image to pull.
const reportSinkDockerfile = `FROM scratch
COPY reportsink /reportsink
USER 65532:65532
ENTRYPOINT ["/reportsink"]
`

// loadImages does what `kind load docker-image` does: docker save, then
// import the archive into containerd on every node.
func (k *Kind) loadImages(ctx context.Context) error {
	nodeList, err := k.provider.ListInternalNodes(k.Name)
	if err != nil {
		return err
	}
	for _, image := range []string{KindProxyImage, KindReportSinkImage} {
		archive := filepath.Join(k.WorkDir, strings.NewReplacer(":", "_", "/", "_").Replace(image)+".tar")
		if err := k.run(ctx, "", nil, "docker", "save", "-o", archive, image); err != nil {
			return err
		}
		for _, n := range nodeList {
			f, err := os.Open(archive)
			if err != nil {
				return err
			}
			err = nodeutils.LoadImageArchive(n, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("loading %s into %s: %w", image, n, err)
			}
		}
		_ = os.Remove(archive)
	}
	return nil
}
