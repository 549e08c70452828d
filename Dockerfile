# syntax=docker/dockerfile:1
#
# The kafka-dedup container image (README, "Deploying"). From the repository root:
#
#     docker build -t kafka-dedup .
#     docker run -e KAFKA_DEDUP__KAFKA__BOOTSTRAP_SERVERS=broker:9092 \
#                -e KAFKA_DEDUP__INPUT__TOPIC=events -e KAFKA_DEDUP__OUTPUT__TOPIC=events.dedup \
#                -v kafka-dedup-store:/var/lib/kafka-dedup -p 9464:9464 kafka-dedup
#
# Stage `build` compiles the release binary; librdkafka is compiled from source by the rdkafka-sys
# crate and links OpenSSL (TLS, SASL/SCRAM) and zlib dynamically. The runtime stage is Debian slim
# of the same release, so the binary runs with the OpenSSL it was built against, plus those two
# libraries; nothing else (`tests/ops.rs::container_image_matches_the_binary` checks the list
# against the binary's `ldd`).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
# What librdkafka's build needs (the same list as scripts/test.sh).
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Symbols stay (readable backtraces), DWARF goes (a smaller image).
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin kafka-dedup \
 && install -D -m 0755 target/release/kafka-dedup /out/kafka-dedup

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# libssl3 and zlib1g: the binary's shared libraries besides libc; ca-certificates: TLS to brokers
# whose certificates chain to a public CA (ssl.ca.location defaults to the system store).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kafka-dedup \
 && useradd --system --uid 10001 --gid kafka-dedup --no-create-home \
        --home-dir /var/lib/kafka-dedup --shell /usr/sbin/nologin kafka-dedup \
 && install -d -o kafka-dedup -g kafka-dedup -m 0750 /var/lib/kafka-dedup
COPY --from=build /out/kafka-dedup /usr/local/bin/kafka-dedup
COPY deploy/kafka-dedup.toml /etc/kafka-dedup/kafka-dedup.toml
# Every configuration key can be set here or at `docker run -e` (KAFKA_DEDUP__SECTION__KEY).
# The HTTP endpoint listens on all interfaces so that Prometheus and the probes reach it; there
# /store/* answer 403 unless KAFKA_DEDUP__HTTP__STORE_TOKEN is set (README, "Security").
ENV KAFKA_DEDUP__STORE__PATH=/var/lib/kafka-dedup \
    KAFKA_DEDUP__HTTP__LISTEN=0.0.0.0:9464 \
    RUST_LOG=info
USER 10001:10001
# The fingerprint store: a cache of the output topic, rebuilt from it when lost, but keeping it
# across restarts makes them fast.
VOLUME ["/var/lib/kafka-dedup"]
EXPOSE 9464
# /healthz on the port of KAFKA_DEDUP__HTTP__LISTEN, with bash alone (no curl in the image).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${KAFKA_DEDUP__HTTP__LISTEN##*:} && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
# SIGTERM: finish the checkpoint, hand the partitions over, exit 0 (allow up to a minute).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kafka-dedup"]
CMD ["run", "--config", "/etc/kafka-dedup/kafka-dedup.toml"]
