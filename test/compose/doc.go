// Package compose tests the Docker packaging of latch: the FROM scratch
// image and docker-compose.yml (3 voters + 1 observer). Its test builds
// static binaries and the image, starts the compose cluster under a unique
// project name, and replaces a voter while a client writes: the leader's
// container is stopped and removed, the member removed with latchctl inside
// the network, a replacement added as a learner, started joining, promoted,
// and leadership transferred to it. Every acknowledged write must be on
// every member at the end, and the longest stretch without a successful
// write must stay within an election's worth of time.
//
// It skips when `docker info` or docker-compose fails, and with -short.
// The project, its volumes and the image are always removed
// (`docker-compose down -v`, `docker rmi`), also when the test fails.
package compose
