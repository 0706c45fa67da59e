-- Weekend spend of members per region, with HAVING and arithmetic as post-processing.
-- Run: dpsql run queries/visits_weekend_members.sql --metadata data/visits.yaml --epsilon 0.5
SELECT region_id,
       COUNT(*)              AS visits,
       SUM(amount)           AS spend,
       SUM(amount) / COUNT(*) AS spend_per_visit
FROM visits
WHERE member AND day IN ('Sat', 'Sun')
GROUP BY region_id
HAVING COUNT(*) > 20
ORDER BY spend DESC;
