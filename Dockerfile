# queuer, scabbard-sim and the helper tools in one image (docker-compose.yml).
#
# Build stage: Debian 12 with exactly the packages scripts/deps.sh installs
# (it is run here), then a release build without the test programs.
# Runtime stage: Debian 12 slim with the shared libraries those binaries
# link, running as an unprivileged user.
#
#   docker build -t queuer:local .
#   docker run --rm queuer:local --help
#
# Without a registry, scripts/cluster.sh compose-up builds a local Debian 12
# base and passes it as both images (--build-arg DEBIAN_IMAGE=...).
ARG DEBIAN_IMAGE=debian:12
ARG DEBIAN_SLIM_IMAGE=debian:12-slim
FROM ${DEBIAN_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive
COPY scripts/deps.sh /src/scripts/deps.sh
RUN /src/scripts/deps.sh && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads, so unrelated edits keep the cache.
COPY meson.build meson_options.txt ./
COPY proto proto
COPY migrations migrations
COPY sql sql
COPY src src
COPY sim sim
COPY tools tools
COPY bench bench
RUN meson setup /build --buildtype=release -Dtests=false \
    && meson compile -C /build \
    && install -d /out \
    && install -m 0755 /build/queuer /build/sim/scabbard-sim \
               /build/tools/queuer-gen /build/tools/qw-check /out/

FROM ${DEBIAN_SLIM_IMAGE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           libpq5 libconfig9 libcurl4 libjansson4 libprotobuf-c1 libmicrohttpd12 \
           ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/queuer --create-home queuer \
    && install -d -o queuer -g queuer /var/lib/scabbard-sim
COPY --from=build /out/ /usr/local/bin/
USER queuer
WORKDIR /var/lib/queuer
ENTRYPOINT ["queuer"]
CMD ["run"]
