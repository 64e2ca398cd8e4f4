# The leaf-server image: every backend compiled in (narrow it with --build-arg FEATURES=...),
# run as an unprivileged user, its state (the SQLite file, the worker id's cache file) on the
# volume /var/lib/leaf. Where no registry can be reached, `cargo xtask image` builds the same
# image from Debian packages and the release binary built on the host (leaf-server:local).
#
#   docker build -t leaf-server .
#   docker run --rm -p 8080:8080 -v leaf-data:/var/lib/leaf leaf-server
#
# Configuration: LEAF_ variables (LEAF_SEGMENT__STORE=mysql ...), or a file mounted at
# /etc/leaf/leaf.toml and the command `--config /etc/leaf/leaf.toml`. SIGTERM stops it
# gracefully: requests in flight finish and the last issued timestamp is recorded.

# The newest stable toolchain; the workspace needs at least its rust-version (Cargo.toml).
ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-bookworm AS builder
ARG FEATURES=all-backends
# etcd-client compiles etcd's protobufs with protoc.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p leaf-server --features "$FEATURES" \
 && install -m 0755 target/release/leaf-server /leaf-server

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/leaf --no-create-home \
      --shell /usr/sbin/nologin leaf \
 && mkdir -p /var/lib/leaf /etc/leaf \
 && chown leaf:leaf /var/lib/leaf
COPY --from=builder /leaf-server /usr/local/bin/leaf-server
USER leaf
WORKDIR /var/lib/leaf
VOLUME ["/var/lib/leaf"]
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/leaf-server", "probe"]
ENTRYPOINT ["/usr/local/bin/leaf-server"]
