// The official TypeScript SDK against Mango: node conformance.mjs BASE_URL API_KEY
// Prints one JSON object of what each call returned; tests/core/test_ts_sdk.py checks it.
import Anthropic, { toFile } from "@anthropic-ai/sdk";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const out = {};

const file = await client.beta.files.upload({ file: await toFile(Buffer.from("hello from node\n"), "node.txt", { type: "text/plain" }) });
out.file = { id: file.id, filename: file.filename, size: file.size_bytes };
const files = [];
for await (const item of client.beta.files.list({ limit: 1 })) files.push(item.id); // pages of one
out.files = files;
out.fileMeta = (await client.beta.files.retrieveMetadata(file.id)).mime_type;

const agent = await client.beta.agents.create({ name: "node", model: "claude-sonnet-4-5", system: "Be brief." });
const updated = await client.beta.agents.update(agent.id, { version: agent.version, description: "from node" });
out.agent = { version: updated.version, description: updated.description };
const environment = await client.beta.environments.create({ name: "node-env" });
const session = await client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, title: "node" });
out.session = { status: session.status, title: session.title };

const stream = await client.beta.sessions.events.stream(session.id);
await client.beta.sessions.events.send(session.id, {
  events: [{ type: "user.message", content: [{ type: "text", text: "hi from node" }] }],
});
const streamed = [];
for await (const event of stream) {
  streamed.push(event.type);
  if (event.type === "agent.message") out.answer = event.content.map((block) => block.text).join("");
  if (event.type === "session.status_idle") break;
}
out.streamed = streamed;
const listed = [];
for await (const event of client.beta.sessions.events.list(session.id)) listed.push(event.type);
out.listed = listed;

const store = await client.beta.memoryStores.create({ name: "node-notes" });
await client.beta.memoryStores.memories.create(store.id, { path: "/a.md", content: "alpha" });
const memories = [];
for await (const memory of client.beta.memoryStores.memories.list(store.id)) memories.push(memory.path);
out.memories = memories;
const vault = await client.beta.vaults.create({ display_name: "node-vault" });
out.vault = vault.display_name;
const skills = [];
for await (const skill of client.beta.skills.list({ source: "anthropic" })) skills.push(skill.id);
out.skills = skills;

try {
  await client.beta.agents.retrieve("agent_missing");
} catch (error) {
  out.missing = { status: error.status, type: error.error?.error?.type };
}
await client.beta.files.delete(file.id);
out.deleted = true;
console.log(JSON.stringify(out));
