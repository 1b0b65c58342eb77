#!/usr/bin/env bash
# Documentation sites outside realweb (eleven packages, fifteen manuals), served by nginx on
# loopback, to check an ordering on sites no rule was tuned on
# (benchmarks/realsite_order.py --site NAME=URL).
# Debian packages (bookworm), their HTML as shipped:
#   cmake       http://127.0.0.1:8121/index.html        cmake-doc (Sphinx)
#   sqlalchemy  http://127.0.0.1:8122/index.html        python-sqlalchemy-doc (Sphinx)
#   glib        http://127.0.0.1:8123/glib/index.html   libglib2.0-doc (gtk-doc)
#   gio         http://127.0.0.1:8123/gio/index.html    (the same package's other manuals)
#   gobject     http://127.0.0.1:8123/gobject/index.html
#   gtk4        http://127.0.0.1:8124/gtk4/index.html   libgtk-4-doc (gi-docgen)
#   gdk4        http://127.0.0.1:8124/gdk4/index.html   (the same package's other manuals)
#   gsk4        http://127.0.0.1:8124/gsk4/index.html
#   sympy       http://127.0.0.1:8125/index.html        python-sympy-doc (Sphinx; too small a
#               part of the docs to tell orderings apart: every one gets the best B)
# and six more, first crawled 2026-11-25 after every rule above was chosen:
#   scrapy      http://127.0.0.1:8131/index.html        python-scrapy-doc (Sphinx)
#   git         http://127.0.0.1:8132/index.html        git-doc (AsciiDoc)
#   nodejs      http://127.0.0.1:8133/index.html        nodejs-doc (Node.js's own generator)
#   sphinx      http://127.0.0.1:8134/index.html        sphinx-doc (Sphinx)
#   flask       http://127.0.0.1:8135/index.html        python-flask-doc (Sphinx)
#   libsoup     http://127.0.0.1:8136/index.html        libsoup-3.0-doc (gi-docgen)
#
#   bash benchmarks/heldout_sites.sh          # install (root, apt-get), start nginx, print the flags
#   bash benchmarks/heldout_sites.sh stop     # stop that nginx (its pid file only)
#
# HELDOUT_DIR (default /tmp/heldout) holds nginx.conf, nginx.pid and logs/.
set -euo pipefail
DIR=${HELDOUT_DIR:-/tmp/heldout}
PKGS="cmake-doc python-sqlalchemy-doc libglib2.0-doc libgtk-4-doc python-sympy-doc
      python-scrapy-doc git-doc nodejs-doc sphinx-doc python-flask-doc libsoup-3.0-doc"

if [ "${1:-start}" = stop ]; then
    [ -f "$DIR/nginx.pid" ] || { echo "heldout: not running"; exit 0; }
    pid=$(cat "$DIR/nginx.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$DIR/nginx.pid"
    echo "heldout: nginx stopped"
    exit 0
fi

missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
    echo "heldout: installing $missing" >&2
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >"$DIR.apt.log" 2>&1 \
        || { echo "heldout: apt-get failed, see $DIR.apt.log" >&2; exit 1; }
fi
command -v nginx >/dev/null || { echo "heldout: nginx is not installed (apt-get install nginx)" >&2; exit 1; }
mkdir -p "$DIR/logs" "$DIR/tmp"
site() { echo "    server { listen 127.0.0.1:$1; root $2; location / { try_files \$uri \$uri/index.html =404; } }"; }
cat >"$DIR/nginx.conf" <<EOF
# written by benchmarks/heldout_sites.sh
user www-data;
worker_processes 2;
pid $DIR/nginx.pid;
error_log $DIR/logs/error.log warn;
events { worker_connections 4096; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on; tcp_nopush on; tcp_nodelay on;
    keepalive_timeout 65; keepalive_requests 100000;
    server_tokens off; log_not_found off; gzip off; etag on;
    client_body_temp_path $DIR/tmp/body;
    proxy_temp_path $DIR/tmp/proxy;
    fastcgi_temp_path $DIR/tmp/fastcgi;
    uwsgi_temp_path $DIR/tmp/uwsgi;
    scgi_temp_path $DIR/tmp/scgi;
    access_log off;
$(site 8121 /usr/share/doc/cmake-data/html)
$(site 8122 /usr/share/doc/python-sqlalchemy-doc/html)
$(site 8123 /usr/share/gtk-doc/html)
$(site 8124 /usr/share/doc/libgtk-4-doc)
$(site 8125 /usr/share/doc/python-sympy-doc/html)
$(site 8131 /usr/share/doc/python-scrapy-doc/html)
$(site 8132 /usr/share/doc/git-doc)
$(site 8133 /usr/share/doc/nodejs/api)
$(site 8134 /usr/share/doc/sphinx-doc/html)
$(site 8135 /usr/share/doc/python-flask-doc/html)
$(site 8136 /usr/share/doc/libsoup-3.0)
}
EOF
if [ -f "$DIR/nginx.pid" ] && kill -0 "$(cat "$DIR/nginx.pid")" 2>/dev/null; then
    nginx -c "$DIR/nginx.conf" -s reload
else
    nginx -c "$DIR/nginx.conf"
fi
echo "--site cmake=http://127.0.0.1:8121/index.html --site sqlalchemy=http://127.0.0.1:8122/index.html" \
     "--site glib=http://127.0.0.1:8123/glib/index.html --site gtk4=http://127.0.0.1:8124/gtk4/index.html" \
     "--site sympy=http://127.0.0.1:8125/index.html --site gio=http://127.0.0.1:8123/gio/index.html" \
     "--site gobject=http://127.0.0.1:8123/gobject/index.html --site gdk4=http://127.0.0.1:8124/gdk4/index.html" \
     "--site gsk4=http://127.0.0.1:8124/gsk4/index.html --site scrapy=http://127.0.0.1:8131/index.html" \
     "--site git=http://127.0.0.1:8132/index.html --site nodejs=http://127.0.0.1:8133/index.html" \
     "--site sphinx=http://127.0.0.1:8134/index.html --site flask=http://127.0.0.1:8135/index.html" \
     "--site libsoup=http://127.0.0.1:8136/index.html"
