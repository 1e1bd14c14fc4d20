# The worker's Docker API proxy for the compose stack (make compose-images): Debian's haproxy with
# docker-proxy.cfg, which allows the API sections the environment turns on (CONTAINERS=1, …) the
# way tecnativa/docker-socket-proxy does, and wget for its health check.
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq && apt-get install -y -qq haproxy wget && rm -rf /var/lib/apt/lists/*
COPY docker-proxy.cfg /etc/haproxy/docker-proxy.cfg
# Every section off unless the environment turns it on; _ping and version always answer.
ENV CONTAINERS=0 EXEC=0 IMAGES=0 VOLUMES=0 NETWORKS=0 INFO=0 BUILD=0 SWARM=0 SERVICES=0 SECRETS=0 \
    PLUGINS=0 SYSTEM=0 TASKS=0 NODES=0 CONFIGS=0 DISTRIBUTION=0 SESSION=0 AUTH=0 COMMIT=0 EVENTS=0 \
    POST=0 DELETE=0
EXPOSE 2375
CMD ["haproxy", "-W", "-db", "-f", "/etc/haproxy/docker-proxy.cfg"]
