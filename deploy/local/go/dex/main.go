// Command dex serves Dex's OpenID Connect provider for the local stack's single
// sign-on tests, from a config file of this wrapper's own (JSON): the issuer, the
// address, static clients and static users with their groups, in memory. Dex's own
// command also serves a gRPC admin API, whose module the Go proxy does not serve at
// this version; this wrapper builds the provider without it, from Dex's packages.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/dexidp/dex/server"
	"github.com/dexidp/dex/server/signer"
	"github.com/dexidp/dex/storage"
	"github.com/dexidp/dex/storage/memory"
	"golang.org/x/crypto/bcrypt"
)

type config struct {
	Issuer  string           `json:"issuer"`
	Listen  string           `json:"listen"`
	Clients []storage.Client `json:"clients"`
	Users   []user           `json:"users"`
}

// A test user: the password in clear (the config is a test's), hashed here.
type user struct {
	Email    string   `json:"email"`
	Password string   `json:"password"`
	Name     string   `json:"name"`
	Groups   []string `json:"groups"`
}

func main() {
	path := flag.String("config", "dex.json", "the wrapper's config file (JSON)")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	raw, err := os.ReadFile(*path)
	if err != nil {
		logger.Error("cannot read the config", "error", err)
		os.Exit(2)
	}
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		logger.Error("the config is not JSON", "error", err)
		os.Exit(2)
	}
	passwords := make([]storage.Password, 0, len(c.Users))
	for _, u := range c.Users {
		hash, err := bcrypt.GenerateFromPassword([]byte(u.Password), bcrypt.DefaultCost)
		if err != nil {
			logger.Error("cannot hash a password", "error", err)
			os.Exit(2)
		}
		passwords = append(passwords, storage.Password{
			Email: u.Email, Hash: hash, Username: u.Name, Name: u.Name, UserID: u.Email, Groups: u.Groups,
		})
	}
	s := memory.New(logger)
	s = storage.WithStaticClients(s, c.Clients)
	s = storage.WithStaticPasswords(s, passwords, logger)
	s = storage.WithStaticConnectors(s, []storage.Connector{{ID: "local", Type: "local", Name: "Email"}})
	ctx := context.Background()
	keys := signer.LocalConfig{KeysRotationPeriod: "6h"}
	sign, err := keys.Open(ctx, s, 24*time.Hour, time.Now, logger)
	if err != nil {
		logger.Error("cannot open the signer", "error", err)
		os.Exit(1)
	}
	serv, err := server.NewServer(ctx, server.Config{
		Issuer: c.Issuer, Storage: s, Signer: sign, Logger: logger,
		SkipApprovalScreen: true, Web: server.WebConfig{},
	})
	if err != nil {
		logger.Error("cannot make the server", "error", err)
		os.Exit(1)
	}
	if err := http.ListenAndServe(c.Listen, serv); err != nil {
		logger.Error("stopped", "error", err)
		os.Exit(1)
	}
}
