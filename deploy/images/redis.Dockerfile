# Redis from Debian's packages for the compose stack (make compose-images). Like the registry's
# redis image it serves other containers (protected mode off; the stack's network is private)
# and keeps its data in /data, as the redis user.
ARG DEBIAN_IMAGE=mango-debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq && apt-get install -y -qq redis-server && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-entrypoint.sh"]
CMD ["redis-server"]
