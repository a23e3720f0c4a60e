// Usage and costs: spend by day, by spec and (for a tenant admin) by user over the last
// 30 days, invoices, and the budget with its thresholds.
import { useState } from "preact/hooks";
import { ApiError, enc, get, items, put } from "../api";
import { BarChart, ErrorNote, Field, Page, Show, Table, cents, money, useAction, useLoad, when, Form } from "../ui";

interface UsageRow {
  key: string;
  gpuSeconds: number;
  amount: string;
}

interface UsageReport {
  start: string;
  end: string;
  rows: UsageRow[];
  total: UsageRow;
  asOf: string;
}

interface InvoiceLine {
  description: string;
  /** The project of a GPU line (decision 138); null for storage, the tenant's. */
  project: string | null;
  quantity: string;
  creditedQuantity: string;
  unitPrice: string | null;
  amountCents: number;
}

interface Invoice {
  invoiceID: string;
  period: string;
  totalCents: number;
  status: string;
  issuedAt: string | null;
  lines: InvoiceLine[];
}

interface Budget {
  period: string;
  monthlyBudgetCents: number;
  thresholds: number[];
  hardStop: boolean;
  spentCents: number;
  crossed: number[];
}

const DAY_MS = 86_400_000;

/** The tenant's report, or a tenant user's own (`mine`: what they started). */
function report(groupBy: string, mine: boolean): Promise<UsageReport> {
  const start = new Date(Date.now() - 30 * DAY_MS).toISOString();
  return get<UsageReport>(`/usage${mine ? "/mine" : ""}?groupBy=${groupBy}&start=${enc(start)}`);
}

/** A tenant admin sees the tenant's spend, budget and invoices; a tenant user sees
 * what their own workloads cost, and nothing they may not read. */
export function UsagePage(props: { role: string }) {
  const mine = props.role === "tenant-user";
  const byDay = useLoad(() => report("day", mine), [], 30_000);
  const bySpec = useLoad(() => report("spec", mine), [], 30_000);
  const invoices = useLoad(
    () => (mine ? Promise.resolve([]) : get<{ items: Invoice[] }>("/invoices?limit=24").then(items)),
    [],
  );
  return (
    <Page title={mine ? "Your usage and costs" : "Usage and costs"}>
      <div class="grid-2">
        <section class="card" aria-label="Spend by day">
          <Show loaded={byDay}>
            {(r) => (
              <>
                <BarChart title="Spend by day" unit="USD" bars={r.rows.map((row) => ({ label: row.key, value: Number(row.amount) }))} />
                <p>
                  Last 30 days: <strong data-testid="usage-total">{money(r.total.amount)}</strong> for{" "}
                  {(r.total.gpuSeconds / 3600).toFixed(3)} GPU-hours (as of {when(r.asOf)}).
                </p>
              </>
            )}
          </Show>
        </section>
        <section class="card" aria-label="Spend by spec">
          <Show loaded={bySpec}>
            {(r) => <BarChart title="Spend by spec" unit="USD" bars={r.rows.map((row) => ({ label: row.key, value: Number(row.amount) }))} />}
          </Show>
        </section>
      </div>
      {!mine && <SpendByUser />}
      {!mine && <SpendByProject />}
      {!mine && <BudgetCard />}
      {!mine && <section class="card" aria-labelledby="invoices-title">
        <h2 id="invoices-title">Invoices</h2>
        <Show loaded={invoices} empty={(rows) => !rows.length} emptyText="No invoices yet: one is issued after each month.">
          {(rows) => (
            <Table
              caption="Invoices"
              rows={rows}
              rowKey={(i) => i.invoiceID}
              columns={[
                { label: "Period", cell: (i) => i.period },
                { label: "Total", cell: (i) => cents(i.totalCents), numeric: true },
                { label: "Status", cell: (i) => i.status },
                { label: "Issued", cell: (i) => when(i.issuedAt) },
              ]}
            />
          )}
        </Show>
      </section>}
      {!mine && <InvoiceLines issued={invoices.data ?? []} />}
    </Page>
  );
}

/** Who spent what: the report keys rows by user id; the tenant's users give the names. */
function SpendByUser() {
  const byUser = useLoad(
    () =>
      Promise.all([
        report("user", false),
        get<{ items: { userID: string; name: string }[] }>("/users?limit=200").then(items),
      ]).then(([r, users]) => {
        const names = new Map(users.map((u) => [u.userID, u.name]));
        return r.rows.map((row) => ({ label: names.get(row.key) ?? row.key, value: Number(row.amount) }));
      }),
    [],
    30_000,
  );
  return (
    <section class="card" aria-label="Spend by user">
      <Show loaded={byUser} empty={(bars) => !bars.length} emptyText="No spend in the last 30 days.">
        {(bars) => <BarChart title="Spend by user" unit="USD" bars={bars} />}
      </Show>
    </section>
  );
}

/** What each project spent (decision 138); shown once work ran in a project besides
 * `default`. */
function SpendByProject() {
  const byProject = useLoad(
    () => report("project", false).then((r) => r.rows.map((row) => ({ label: row.key, value: Number(row.amount) }))),
    [],
    30_000,
  );
  const bars = byProject.data;
  if (!bars || bars.length < 2) return null;
  return (
    <section class="card" aria-label="Spend by project">
      <BarChart title="Spend by project" unit="USD" bars={bars} />
    </section>
  );
}

/** One invoice line by line: this month's so far (a draft), or an issued one. Each GPU
 * line is a project's, spec's and price's, so a project's lines add up to its usage. */
function InvoiceLines(props: { issued: Invoice[] }) {
  const [chosen, setChosen] = useState("");
  const month = new Date().toISOString().slice(0, 7);
  const invoice = useLoad(
    () => get<Invoice>(chosen ? `/invoices/${enc(chosen)}` : `/invoice-drafts/${month}`),
    [chosen],
    chosen ? undefined : 60_000,
  );
  const periodOf = (id: string) => props.issued.find((i) => i.invoiceID === id)?.period ?? id;
  return (
    <section class="card" aria-labelledby="invoice-lines-title">
      <h2 id="invoice-lines-title">Invoice lines</h2>
      <Field
        label="Invoice"
        name="invoice"
        value={chosen}
        onInput={setChosen}
        options={["", ...props.issued.map((i) => i.invoiceID)]}
        emptyLabel={`${month} so far`}
        optionLabel={periodOf}
      />
      <Show loaded={invoice} empty={(i) => !i.lines.length} emptyText="Nothing billed in this month yet.">
        {(i) => (
          <Table
            caption={`Invoice lines, ${i.period} (${i.status}): ${cents(i.totalCents)}`}
            rows={i.lines}
            rowKey={(line) => `${line.project ?? "-"} ${line.description} ${line.unitPrice ?? ""}`}
            columns={[
              { label: "Project", cell: (line) => line.project ?? "—" },
              { label: "Description", cell: (line) => line.description },
              { label: "Quantity", cell: (line) => Number(line.quantity).toFixed(4), numeric: true },
              { label: "Credited", cell: (line) => Number(line.creditedQuantity).toFixed(4), numeric: true },
              { label: "Unit price", cell: (line) => (line.unitPrice === null ? "—" : money(line.unitPrice)), numeric: true },
              { label: "Amount", cell: (line) => cents(line.amountCents), numeric: true },
            ]}
          />
        )}
      </Show>
    </section>
  );
}

function BudgetCard() {
  const budget = useLoad(
    () => get<Budget>("/budget").catch((e) => (e instanceof ApiError && e.status === 404 ? null : Promise.reject(e))),
    [],
  );
  const [dollars, setDollars] = useState("");
  const [thresholds, setThresholds] = useState("50, 80, 100");
  const action = useAction();
  const save = (e: Event) => {
    e.preventDefault();
    const body = {
      monthlyBudgetCents: Math.round(Number(dollars) * 100),
      thresholds: thresholds.split(",").map((t) => Number(t.trim())).filter(Boolean),
    };
    void action.run(async () => {
      await put("/budget", body);
      budget.reload();
    });
  };
  return (
    <section class="card" aria-labelledby="budget-title">
      <h2 id="budget-title">Budget</h2>
      <Show loaded={budget}>
        {(b) =>
          b ? (
            <p>
              {b.period}: {cents(b.spentCents)} spent of {cents(b.monthlyBudgetCents)}; notices at {b.thresholds.join(" %, ")} %
              {b.crossed.length ? ` (crossed: ${b.crossed.join(" %, ")} %)` : ""}
              {b.hardStop ? "; work stops at 100 %" : ""}.
            </p>
          ) : (
            <p class="muted">No budget set.</p>
          )
        }
      </Show>
      <Form action={action} class="inline" onSubmit={save}>
        <Field label="Monthly budget (USD)" name="budget" field="monthlyBudgetCents" type="number" step="0.01" value={dollars} onInput={setDollars} required />
        <Field label="Notify at (% list)" name="thresholds" value={thresholds} onInput={setThresholds} />
        <button type="submit" disabled={action.busy}>
          Save budget
        </button>
      </Form>
      <ErrorNote error={action.error} />
    </section>
  );
}
