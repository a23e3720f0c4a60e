// Command ferretdb serves the MongoDB wire protocol on SQLite or PostgreSQL,
// through FerretDB's embeddable package.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listenAddr := flag.String("listen-addr", "127.0.0.1:27017", "TCP address to serve the MongoDB wire protocol on")
	handler := flag.String("handler", "sqlite", "storage backend: sqlite or postgresql")
	sqliteURL := flag.String("sqlite-url", "file:data/", "SQLite URI of the data directory (must end with /)")
	postgresqlURL := flag.String("postgresql-url", os.Getenv("FERRETDB_POSTGRESQL_URL"),
		"PostgreSQL connection string for -handler=postgresql (default $FERRETDB_POSTGRESQL_URL, which keeps a password off the command line)")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		slog.Error("invalid -log-level", "error", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	server, err := ferretdb.New(&ferretdb.Config{
		Listener:      ferretdb.ListenerConfig{TCP: *listenAddr},
		Logger:        logger,
		Handler:       *handler,
		SQLiteURL:     *sqliteURL,
		PostgreSQLURL: *postgresqlURL,
	})
	if err != nil {
		logger.Error("cannot start FerretDB", "error", err)
		os.Exit(1)
	}
	logger.Info("serving", "addr", *listenAddr, "handler", *handler)
	if err := server.Run(ctx); err != nil {
		logger.Error("FerretDB stopped", "error", err)
		os.Exit(1)
	}
}
