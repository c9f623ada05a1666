# latch in a container, FROM scratch: the image holds only the statically
# built latchd and latchctl, so building it needs no base image and no
# registry. Build the binaries first and use a context holding just them:
#
#   scripts/docker-image            # = the three commands below
#   CGO_ENABLED=0 go build -trimpath -o ctx/latchd ./cmd/latchd
#   CGO_ENABLED=0 go build -trimpath -o ctx/latchctl ./cmd/latchctl
#   docker build -f Dockerfile -t latch:dev ctx
#
# The data directory is the volume /data. latchd advertises its
# --listen-client address to clients (leader hints) and its --listen-peer
# address to peers, so listen on a name the other containers resolve
# (the compose service name), not 0.0.0.0; see docker-compose.yml.
# latchd refuses a non-loopback address without TLS: the default command
# below exits naming --insecure-listen until you add TLS flags
# (docs/security.md) or, on a private network, --insecure-listen.
FROM scratch
COPY latchd latchctl /
VOLUME /data
EXPOSE 2379 2380
ENTRYPOINT ["/latchd"]
CMD ["--data-dir", "/data", "--listen-client", "0.0.0.0:2379", "--listen-peer", "0.0.0.0:2380"]
