// render-email-as: renders an email from a template and the job's variables.
//
// The payload is "key=value" lines; the template, chosen by the line template=NAME, is
// one of the templates below. Every {{key}} is replaced by its value; a {{key}} without
// a value dead-letters the job (the sender must fix it). The rendered email goes to the
// output, and to the queue "send-email" as a child job.
import { Job, Outcome, handle, deadLetter } from "../../../guest-sdk/assemblyscript/assembly/index";
export { wasmjobs_abi_v1, wasmjobs_handle, wasmjobs_serve } from "../../../guest-sdk/assemblyscript/assembly/index";

const templates = new Map<string, string>();
templates.set("welcome", "Subject: Welcome, {{name}}!\n\nHello {{name}},\n\nyour account {{account}} is ready.\n");
templates.set("shipped", "Subject: Order {{order}} shipped\n\nHello {{name}},\n\nyour order {{order}} is on its way.\n");

handle((job: Job): Outcome => {
  const vars = new Map<string, string>();
  const lines = job.text().split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line.length == 0) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) return deadLetter("line " + (i + 1).toString() + " is not key=value: " + line);
    vars.set(line.substring(0, eq).trim(), line.substring(eq + 1).trim());
  }
  if (!vars.has("template")) return deadLetter("no template= line");
  const name = vars.get("template");
  if (!templates.has(name)) return deadLetter("unknown template " + name);
  let out = templates.get(name);
  while (true) {
    const open = out.indexOf("{{");
    if (open < 0) break;
    const close = out.indexOf("}}", open);
    const key = out.substring(open + 2, close);
    if (!vars.has(key)) return deadLetter("template " + name + " needs " + key);
    out = out.substring(0, open) + vars.get(key) + out.substring(close + 2);
  }
  job.output(out);
  job.enqueue("send-email", out, 0);
  job.info("rendered " + name + " for " + (vars.has("name") ? vars.get("name") : "?"));
  return Outcome.Ack;
});
