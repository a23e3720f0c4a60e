// Accepting an invitation: the link's secret is in the URL's fragment (never sent to a
// server with the page); the person sees who invites them, sets their name and a
// password, and is signed in as the new user; or, where the tenant has single sign-on,
// signs in at its provider with the invited email.
import { useEffect, useState } from "preact/hooks";
import { post, type ConsoleSession } from "../api";
import { ErrorNote, Field, useAction, when } from "../ui";

interface Offer {
  email: string;
  tenantID: string;
  tenantName: string;
  role: string;
  /** The projects they join on accepting. */
  projects: string[];
  expiresAt: string;
  singleSignOn: boolean;
}

export function JoinPage(props: { onSignedIn: (session: ConsoleSession) => void }) {
  const token = location.hash.slice(1);
  const [offer, setOffer] = useState<Offer | null>(null);
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const looked = useAction();
  const action = useAction();
  const bySso = useAction();
  const joinBySso = () =>
    void bySso.run(async () => {
      const { providerURL } = await post<{ providerURL: string }>("/invitations/sso", { token });
      history.replaceState(null, "", "/join"); // the secret leaves the address bar
      location.assign(providerURL);
    });
  useEffect(() => {
    void looked.run(async () => setOffer(await post<Offer>("/invitations/preview", { token })));
  }, [token]);
  const accept = (e: Event) => {
    e.preventDefault();
    if (!offer) return;
    void action.run(async () => {
      await post("/invitations/accept", { token, name, password });
      const session = await post<ConsoleSession>("/console/session", { email: offer.email, password });
      history.replaceState(null, "", "/instances"); // the secret leaves the address bar
      props.onSignedIn(session);
    });
  };
  return (
    <main id="main" class="sign-in">
      <form onSubmit={accept} aria-labelledby="join-title">
        <h1 id="join-title">Join gpucloud</h1>
        <ErrorNote error={looked.error} />
        {offer && (
          <>
            <p>
              <strong>{offer.tenantName}</strong> invites <strong>{offer.email}</strong> as {offer.role}
              {offer.projects.length > 0 && <>, in projects {offer.projects.join(", ")}</>}. The invitation works
              until {when(offer.expiresAt)}.
            </p>
            <Field label="Your name" name="name" value={name} onInput={setName} required autocomplete="name" />
            <Field label="New password (12 characters or more)" name="password" type="password" value={password} onInput={setPassword} required autocomplete="new-password" />
            <ErrorNote error={action.error} />
            <button type="submit" disabled={action.busy}>
              {action.busy ? "Joining…" : "Join and sign in"}
            </button>
            {offer.singleSignOn && (
              <>
                <p class="muted">Or, without a password here: sign in at your organisation's provider as {offer.email}.</p>
                <button type="button" onClick={joinBySso} disabled={bySso.busy}>
                  Join with single sign-on
                </button>
                <ErrorNote error={bySso.error} />
              </>
            )}
          </>
        )}
      </form>
    </main>
  );
}
